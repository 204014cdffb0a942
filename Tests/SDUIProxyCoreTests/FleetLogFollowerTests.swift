import SDUIProxyCore
import Testing

@Suite("Following the fleet's log")
struct FleetLogFollowerTests {
    typealias Follower = FleetLogFollower

    static func purge(_ prefix: String) -> FleetLogEntry.Payload {
        .invalidation(CacheInvalidation(.prefix(prefix)))
    }

    static func row(_ id: Int64, _ prefix: String) -> FleetLogEntry {
        FleetLogEntry(id: id, payload: purge(prefix))
    }

    /// The payloads of the write among `actions`, nil for none.
    static func written(_ actions: [Follower.Action]) -> [FleetLogEntry.Payload]? {
        for case .record(let made) in actions { return made.map(\.payload) }
        return nil
    }

    /// `actions` with the write's tokens left out, to compare with what a test expects.
    static func withoutTokens(_ actions: [Follower.Action]) -> [String] {
        actions.map { action in
            if case .record(let made) = action { return "record \(made.map(\.payload))" }
            return "\(action)"
        }
    }

    /// A follower connected at `head`, with nothing in flight.
    static func connected(head: Int64 = 10) -> Follower {
        var follower = Follower()
        #expect(follower.start() == [.connect])
        #expect(follower.connected(head: head, prunedThrough: 0) == [.fetch(after: head)])
        #expect(follower.fetched([], prunedThrough: 0) == [])
        return follower
    }

    @Test("a new replica starts at the log's head: rows before it predate its cache")
    func startsAtHead() {
        var follower = Follower()
        #expect(follower.appliedID == nil)
        #expect(follower.start() == [.connect])
        #expect(follower.start() == [])
        #expect(follower.connected(head: 41, prunedThrough: 7) == [.fetch(after: 41)])
        #expect(follower.appliedID == 41)
        #expect(follower.fetched([Self.row(42, "/a")], prunedThrough: 7) == [.apply([Self.row(42, "/a")])])
        #expect(follower.appliedID == 42)
    }

    @Test("a notification during a fetch fetches again once it ends, not twice at once")
    func notificationsCoalesce() {
        var follower = Self.connected()
        #expect(follower.rowsMayHaveArrived() == [.fetch(after: 10)])
        #expect(follower.rowsMayHaveArrived() == [])
        #expect(follower.rowsMayHaveArrived() == [])
        #expect(
            follower.fetched([Self.row(11, "/a")], prunedThrough: 0) == [
                .apply([Self.row(11, "/a")]), .fetch(after: 11),
            ]
        )
        #expect(follower.fetched([], prunedThrough: 0) == [])
        #expect(follower.rowsMayHaveArrived() == [.fetch(after: 11)])
    }

    @Test("rows this replica wrote are skipped: they were applied when made")
    func ownRowsSkipped() {
        var follower = Self.connected()
        let made = follower.made(Self.purge("/mine"))
        #expect(made.writing)
        #expect(Self.written(made.actions) == [Self.purge("/mine")])
        #expect(follower.recorded(ids: [12]) == [])
        #expect(follower.rowsMayHaveArrived() == [.fetch(after: 10)])
        #expect(
            follower.fetched([Self.row(11, "/a"), Self.row(12, "/mine"), Self.row(13, "/b")], prunedThrough: 0) == [
                .apply([Self.row(11, "/a"), Self.row(13, "/b")])
            ]
        )
        #expect(follower.appliedID == 13)
    }

    @Test("a lost connection reconnects with a doubling delay capped at two seconds, and catches up from the cursor")
    func reconnects() {
        var follower = Self.connected()
        #expect(follower.connectionLost() == [.scheduleReconnect(after: .milliseconds(100))])
        #expect(follower.connectionLost() == [])
        #expect(follower.rowsMayHaveArrived() == [])
        var delays: [Duration] = []
        for _ in 0..<8 {
            #expect(follower.reconnectDue() == [.connect])
            guard case .scheduleReconnect(let delay) = follower.connectionLost().first else {
                Issue.record("no reconnection scheduled")
                return
            }
            delays.append(delay)
        }
        #expect(
            delays == [
                .milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600), .seconds(2),
                .seconds(2), .seconds(2), .seconds(2),
            ]
        )
        #expect(follower.reconnectDue() == [.connect])
        #expect(follower.connected(head: 30, prunedThrough: 0) == [.fetch(after: 10)])
        #expect(follower.isConnected)
    }

    @Test("invalidations made while the log is unreachable are written, in order, on reconnection")
    func pendingWrittenOnReconnect() {
        var follower = Self.connected()
        _ = follower.connectionLost()
        let first = follower.made(Self.purge("/1"))
        #expect(!first.writing && first.actions.isEmpty)
        #expect(follower.made(Self.purge("/2")).actions.isEmpty)
        #expect(follower.pendingCount == 2)
        _ = follower.reconnectDue()
        let actions = follower.connected(head: 10, prunedThrough: 0)
        #expect(Self.written(actions) == [Self.purge("/1"), Self.purge("/2")])
        #expect(actions.count == 1)
        #expect(follower.pendingTokens.first == first.token)
        // The log is read once the rows' ids are known, so neither is taken for another replica's.
        #expect(follower.recorded(ids: [11, 12]) == [.fetch(after: 10)])
        #expect(follower.pendingCount == 0)
    }

    @Test("no read of the log while a write runs: a row of this replica's could be read before its id is known")
    func noFetchWhileWriting() {
        var follower = Self.connected()
        #expect(Self.written(follower.made(Self.purge("/mine")).actions) == [Self.purge("/mine")])
        #expect(follower.rowsMayHaveArrived() == [])
        #expect(follower.recorded(ids: [11]) == [.fetch(after: 10)])
        #expect(follower.fetched([Self.row(11, "/mine")], prunedThrough: 0) == [])
        #expect(follower.appliedID == 11)
    }

    @Test("one write at a time; a write that fails goes back ahead of what was made after it")
    func failedRecordKeepsOrder() {
        var follower = Self.connected()
        #expect(Self.written(follower.made(Self.purge("/1")).actions) == [Self.purge("/1")])
        let second = follower.made(Self.purge("/2"))
        #expect(second.writing && second.actions.isEmpty)
        follower.recordFailed()
        _ = follower.connectionLost()
        #expect(!follower.made(Self.purge("/3")).writing)
        _ = follower.reconnectDue()
        #expect(
            Self.written(follower.connected(head: 10, prunedThrough: 0)) == [
                Self.purge("/1"), Self.purge("/2"), Self.purge("/3"),
            ]
        )
        #expect(Self.written(follower.made(Self.purge("/4")).actions) == nil)
        #expect(Self.written(follower.recorded(ids: [11, 12, 13])) == [Self.purge("/4")])
    }

    @Test("past the pending limit the replica empties its cache and invalidates everything for the fleet")
    func pendingOverflow() {
        var follower = Follower(maximumPending: 3)
        _ = follower.start()
        _ = follower.connected(head: 0, prunedThrough: 0)
        _ = follower.fetched([], prunedThrough: 0)
        _ = follower.connectionLost()
        for index in 0..<5 { _ = follower.made(Self.purge("/\(index)")) }
        #expect(follower.pendingCount == 4)
        _ = follower.reconnectDue()
        #expect(
            Self.withoutTokens(follower.connected(head: 0, prunedThrough: 0))
                == Self.withoutTokens([
                    .flushCache(.tooManyPending(3)),
                    .record([.init(token: 0, payload: .invalidation(CacheInvalidation(.all)))]),
                ])
        )
        #expect(follower.pendingCount == 1)
    }

    @Test("a cursor the log pruned past empties the cache: on reconnection, and while following")
    func fellBehindRetention() {
        var follower = Self.connected(head: 10)
        _ = follower.connectionLost()
        _ = follower.reconnectDue()
        #expect(
            follower.connected(head: 90, prunedThrough: 50) == [
                .flushCache(.fellBehindRetention(appliedID: 10, prunedThrough: 50)), .fetch(after: 90),
            ]
        )
        #expect(follower.fetched([], prunedThrough: 50) == [])
        #expect(follower.rowsMayHaveArrived() == [.fetch(after: 90)])
        #expect(
            follower.fetched([Self.row(121, "/x")], prunedThrough: 120) == [
                .flushCache(.fellBehindRetention(appliedID: 90, prunedThrough: 120)), .apply([Self.row(121, "/x")]),
            ]
        )
        #expect(follower.appliedID == 121)
    }

    @Test("a log behind the cursor (the database replaced or restored) empties the cache and starts at its head")
    func logWentBack() {
        var follower = Self.connected(head: 50_000)
        _ = follower.connectionLost()
        _ = follower.reconnectDue()
        #expect(
            follower.connected(head: 3, prunedThrough: 0) == [
                .flushCache(.logWentBack(appliedID: 50_000, head: 3)), .fetch(after: 3),
            ]
        )
        #expect(follower.fetched([Self.row(4, "/a")], prunedThrough: 0) == [.apply([Self.row(4, "/a")])])
    }

    @Test("events out of place do nothing")
    func eventsOutOfPlace() {
        var follower = Follower()
        #expect(follower.rowsMayHaveArrived() == [])
        #expect(follower.connected(head: 3, prunedThrough: 0) == [])
        #expect(follower.fetched([Self.row(1, "/a")], prunedThrough: 0) == [])
        #expect(follower.reconnectDue() == [])
        #expect(follower.connectionLost() == [])
        #expect(follower.appliedID == nil)
    }

    /// A simulated log shared with other replicas, a connection that drops, notifications that are lost, and
    /// fetches answered late: whatever the order, once connected and caught up, this replica has applied every
    /// other replica's row after its start exactly once, in id order, none of its own, and written everything it
    /// made in the order it made it.
    @Test("random sequences: every other row applied once and in order, every own invalidation written in order")
    func randomSequences() {
        for seed in UInt64(1)...300 {
            var random = SplitMix64(seed: seed)
            var simulation = Simulation()
            for _ in 0..<120 { simulation.step(Int(random.next() % 9), &random) }
            simulation.settle()
            let expected = simulation.log.filter { !$0.own && $0.id > simulation.startHead }.map(\.id)
            #expect(simulation.applied == expected, "seed \(seed)")
            #expect(simulation.log.filter(\.own).map(\.label) == simulation.made, "seed \(seed)")
            if simulation.applied != expected { return }
        }
    }

    struct Simulation {
        struct Row {
            var id: Int64
            var label: String
            var own: Bool
        }

        var follower = Follower()
        var log: [Row] = []
        var nextID: Int64 = 1
        var startHead: Int64 = -1
        var applied: [Int64] = []
        var made: [String] = []
        var madeCount = 0
        var connecting = false
        var reconnectScheduled = false
        var fetchAfter: Int64?
        var records: [[Follower.Made]] = []

        init() {
            run(follower.start())
            // Rows written before the first connection belong to no cache of this replica.
            appendOther()
        }

        mutating func appendOther() {
            log.append(Row(id: nextID, label: "other \(nextID)", own: false))
            nextID += 1
        }

        mutating func step(_ choice: Int, _ random: inout SplitMix64) {
            switch choice {
            case 0, 1: appendOther()
            case 2:
                madeCount += 1
                let label = "mine \(madeCount)"
                made.append(label)
                run(follower.made(.invalidation(CacheInvalidation(.prefix(label)))).actions)
            case 3: run(follower.rowsMayHaveArrived())
            case 4: answerFetch()
            case 5: answerRecord(succeeding: random.next() % 4 != 0)
            case 6: run(follower.connectionLost())
            case 7: answerConnect(succeeding: random.next() % 3 != 0)
            default:
                if reconnectScheduled {
                    reconnectScheduled = false
                    run(follower.reconnectDue())
                }
            }
        }

        mutating func settle() {
            for _ in 0..<200 {
                if !records.isEmpty {
                    answerRecord(succeeding: true)
                } else if fetchAfter != nil {
                    answerFetch()
                } else if connecting {
                    answerConnect(succeeding: true)
                } else if reconnectScheduled {
                    reconnectScheduled = false
                    run(follower.reconnectDue())
                } else if follower.isConnected {
                    run(follower.rowsMayHaveArrived())
                    if fetchAfter == nil { return }
                }
            }
        }

        mutating func answerConnect(succeeding: Bool) {
            guard connecting else { return }
            connecting = false
            if succeeding {
                run(follower.connected(head: nextID - 1, prunedThrough: 0))
                // The first connection the follower took (not one it had given up on) sets where it starts.
                if startHead < 0, let applied = follower.appliedID { startHead = applied }
            } else {
                run(follower.connectionLost())
            }
        }

        mutating func answerFetch() {
            guard let after = fetchAfter else { return }
            fetchAfter = nil
            let rows = log.filter { $0.id > after }.map {
                FleetLogEntry(id: $0.id, payload: .invalidation(CacheInvalidation(.prefix($0.label))))
            }
            // A fetch answered after its connection dropped is ignored by the follower: it must not count.
            run(follower.fetched(rows, prunedThrough: 0))
        }

        mutating func answerRecord(succeeding: Bool) {
            guard !records.isEmpty else { return }
            let batch = records.removeFirst()
            if succeeding {
                var ids: [Int64] = []
                for made in batch {
                    guard case .invalidation(let invalidation) = made.payload,
                        case .prefix(let label) = invalidation.scope
                    else { continue }
                    log.append(Row(id: nextID, label: label, own: true))
                    ids.append(nextID)
                    nextID += 1
                }
                run(follower.recorded(ids: ids))
            } else {
                follower.recordFailed()
                run(follower.connectionLost())
            }
        }

        mutating func run(_ actions: [Follower.Action]) {
            for action in actions {
                switch action {
                case .connect: connecting = true
                case .scheduleReconnect: reconnectScheduled = true
                case .fetch(let after): fetchAfter = after
                case .record(let made): records.append(made)
                case .apply(let entries): applied += entries.map(\.id)
                case .flushCache: break
                }
            }
        }
    }
}
