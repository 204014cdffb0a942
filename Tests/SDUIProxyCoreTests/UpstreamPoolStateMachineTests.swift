import NIOCore
import SDUIProxyCore
import Testing

@Suite("The upstream pool's state machine")
struct UpstreamPoolStateMachineTests {
    typealias Pool = UpstreamPoolStateMachine
    typealias ConnectionID = UpstreamPoolStateMachine.ConnectionID
    typealias WaiterID = UpstreamPoolStateMachine.WaiterID

    static let deadline = NIODeadline.uptimeNanoseconds(1_000_000_000)

    /// Checks what must hold after every event, for the connections the test has seen.
    static func checkInvariants(
        _ pool: Pool,
        known connections: some Sequence<ConnectionID>,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(pool.connectionCount <= pool.limit, "over the limit", sourceLocation: sourceLocation)
        let states = connections.map { pool.state(of: $0) }
        #expect(
            states.count { $0 != .closed } == pool.connectionCount,
            "every counted connection is one the driver was told about",
            sourceLocation: sourceLocation
        )
        #expect(
            Set(pool.idleConnections) == Set(connections.filter { pool.state(of: $0) == .idle }),
            sourceLocation: sourceLocation
        )
        #expect(Set(pool.idleConnections).count == pool.idleConnections.count, sourceLocation: sourceLocation)
        #expect(pool.forwardCount <= pool.forwardLimit, "forwards over their share", sourceLocation: sourceLocation)
        let held = states.count {
            if case .connecting = $0 { return true }
            return $0 == .leased
        }
        #expect(
            pool.forwardCount <= held,
            "forwards counted on connections nobody holds",
            sourceLocation: sourceLocation
        )
        // A forward waits while forwards hold their whole share, whatever else is free; nothing else waits for a
        // reason other than a full pool.
        let servable =
            pool.mayTakeConnection(for: .forward)
            ? pool.parkedWaiters : pool.parkedWaiters.filter { !pool.parkedForwards.contains($0) }
        if !servable.isEmpty {
            // Nobody waits while a connection is idle or there is room for a new one.
            #expect(
                pool.idleConnections.isEmpty,
                "a waiter parked by an idle connection",
                sourceLocation: sourceLocation
            )
            #expect(pool.connectionCount == pool.limit, "a waiter parked with room", sourceLocation: sourceLocation)
            #expect(!pool.isShutDown, sourceLocation: sourceLocation)
        }
    }

    // MARK: - Requests

    @Test("a request takes the idle connection used last, else opens one while there is room, else parks")
    func leaseRequested() {
        var pool = Pool(limit: 2)
        #expect(pool.leaseRequested(deadline: Self.deadline) == .open(ConnectionID(0), for: WaiterID(0)))
        #expect(pool.state(of: ConnectionID(0)) == .connecting(for: WaiterID(0)))
        #expect(pool.leaseRequested(deadline: Self.deadline) == .open(ConnectionID(1), for: WaiterID(1)))
        #expect(pool.leaseRequested(deadline: Self.deadline) == .park(WaiterID(2), until: Self.deadline))
        #expect(pool.deadline(of: WaiterID(2)) == Self.deadline)
        #expect(pool.connectionCount == 2)

        #expect(pool.connectionEstablished(ConnectionID(0)) == .lease(ConnectionID(0), to: WaiterID(0)))
        #expect(pool.connectionEstablished(ConnectionID(1)) == .lease(ConnectionID(1), to: WaiterID(1)))
        // The parked waiter gets the first connection released; the second goes idle.
        #expect(pool.connectionReleased(ConnectionID(1), reusable: true) == .lease(ConnectionID(1), to: WaiterID(2)))
        #expect(pool.connectionReleased(ConnectionID(0), reusable: true) == .none)
        #expect(pool.connectionReleased(ConnectionID(1), reusable: true) == .none)
        #expect(pool.idleConnections == [ConnectionID(0), ConnectionID(1)])
        // The connection used last is taken first.
        #expect(pool.leaseRequested(deadline: Self.deadline) == .lease(ConnectionID(1), to: WaiterID(3)))
        #expect(pool.leaseRequested(deadline: Self.deadline) == .lease(ConnectionID(0), to: WaiterID(4)))
        #expect(pool.leaseRequested(deadline: Self.deadline) == .park(WaiterID(5), until: Self.deadline))
        Self.checkInvariants(pool, known: [ConnectionID(0), ConnectionID(1)])
    }

    @Test("a limit below one is a limit of one")
    func limitOfOne() {
        var pool = Pool(limit: 0)
        #expect(pool.limit == 1)
        #expect(pool.leaseRequested(deadline: Self.deadline) == .open(ConnectionID(0), for: WaiterID(0)))
        #expect(pool.leaseRequested(deadline: Self.deadline) == .park(WaiterID(1), until: Self.deadline))
    }

    // MARK: - The forwards' share

    @Test("forwards hold at most their share; one over it waits while fills still get connections")
    func forwardWaitsWhileFillsGetConnections() {
        var pool = Pool(limit: 4, forwardLimit: 2)
        #expect(pool.leaseRequested(deadline: Self.deadline, for: .forward) == .open(ConnectionID(0), for: WaiterID(0)))
        #expect(pool.leaseRequested(deadline: Self.deadline, for: .forward) == .open(ConnectionID(1), for: WaiterID(1)))
        // Room for two more connections, but forwards hold their share.
        #expect(pool.leaseRequested(deadline: Self.deadline, for: .forward) == .park(WaiterID(2), until: Self.deadline))
        #expect(pool.parkedForwards == [WaiterID(2)])
        #expect(pool.forwardCount == 2)
        // Fills take the rest of the pool.
        #expect(pool.leaseRequested(deadline: Self.deadline, for: .fill) == .open(ConnectionID(2), for: WaiterID(3)))
        #expect(pool.leaseRequested(deadline: Self.deadline, for: .fill) == .open(ConnectionID(3), for: WaiterID(4)))
        for id in 0..<4 { _ = pool.connectionEstablished(ConnectionID(id)) }
        // A fill's connection released goes idle, not to the waiting forward; the next fill takes it.
        #expect(pool.connectionReleased(ConnectionID(2), reusable: true) == .none)
        #expect(pool.idleConnections == [ConnectionID(2)])
        #expect(pool.leaseRequested(deadline: Self.deadline, for: .fill) == .lease(ConnectionID(2), to: WaiterID(5)))
        // A forward's connection released goes to the waiting forward.
        #expect(pool.connectionReleased(ConnectionID(0), reusable: true) == .lease(ConnectionID(0), to: WaiterID(2)))
        #expect(pool.forwardCount == 2)
        #expect(pool.parkedWaiters.isEmpty)
        Self.checkInvariants(pool, known: (0..<4).map(ConnectionID.init))
    }

    @Test("fills are never starved by forwards: however many forwards wait, fills are served from the rest")
    func fillsNeverStarvedByForwards() {
        var pool = Pool(limit: 4, forwardLimit: 2)
        var known: [ConnectionID] = []
        var forwardConnections: [ConnectionID] = []
        for _ in 0..<50 {
            if case .open(let connection, let waiter) = pool.leaseRequested(deadline: Self.deadline, for: .forward) {
                known.append(connection)
                #expect(pool.connectionEstablished(connection) == .lease(connection, to: waiter))
                forwardConnections.append(connection)
            }
        }
        #expect(forwardConnections.count == 2)
        #expect(pool.parkedForwards.count == 48)
        // Round after round, two fills at once get connections and give them back, while the forwards' connections
        // stay busy, or close and are replaced for the next waiting forward.
        for round in 0..<10 {
            var held: [ConnectionID] = []
            for _ in 0..<2 {
                switch pool.leaseRequested(deadline: Self.deadline, for: .fill) {
                case .open(let connection, let waiter):
                    known.append(connection)
                    #expect(pool.connectionEstablished(connection) == .lease(connection, to: waiter))
                    held.append(connection)
                case .lease(let connection, _):
                    held.append(connection)
                case let other:
                    Issue.record("round \(round): a fill got \(other)")
                }
            }
            for connection in held { #expect(pool.connectionReleased(connection, reusable: true) == .none) }
            // A forward's connection that cannot be reused closes, and the next forward gets a connection at once:
            // an idle one, or a new one.
            let finished = forwardConnections.removeFirst()
            switch pool.connectionReleased(finished, reusable: false) {
            case .closeAndLease(finished, let idle, _):
                forwardConnections.append(idle)
            case .closeAndOpen(finished, let opened, let waiter):
                known.append(opened)
                #expect(pool.connectionEstablished(opened) == .lease(opened, to: waiter))
                forwardConnections.append(opened)
            case let other:
                Issue.record("round \(round): a forward's release gave \(other), not a connection to the next forward")
                return
            }
            Self.checkInvariants(pool, known: known)
            // Its room is the fills': no forward gets it.
            #expect(pool.connectionClosed(finished) == .none)
            Self.checkInvariants(pool, known: known)
        }
        #expect(pool.forwardCount == 2)
        #expect(pool.parkedForwards.count == 38)
    }

    @Test("a share larger than the pool, or below one, is the pool, or one")
    func forwardLimitBounds() {
        #expect(Pool(limit: 4, forwardLimit: 9).forwardLimit == 4)
        #expect(Pool(limit: 4, forwardLimit: 0).forwardLimit == 1)
        #expect(Pool(limit: 4).forwardLimit == 4)
    }

    // MARK: - Every connection event in every connection state

    /// The states a connection can be in, each with the pool set up around it: a limit of one, connection 0 in
    /// that state and, where it counts and is not idle, waiter 1 parked behind it.
    enum Start: String, CaseIterable, CustomStringConvertible {
        case connecting, idle, leased, closing, closed
        var description: String { rawValue }

        func pool() -> Pool {
            var pool = Pool(limit: 1)
            let connection = ConnectionID(0)
            _ = pool.leaseRequested(deadline: UpstreamPoolStateMachineTests.deadline)
            switch self {
            case .connecting:
                break
            case .idle:
                _ = pool.connectionEstablished(connection)
                _ = pool.connectionReleased(connection, reusable: true)
                return pool
            case .leased, .closing:
                _ = pool.connectionEstablished(connection)
            case .closed:
                _ = pool.connectionEstablished(connection)
                _ = pool.connectionReleased(connection, reusable: false)
                _ = pool.connectionClosed(connection)
                return pool
            }
            _ = pool.leaseRequested(deadline: UpstreamPoolStateMachineTests.deadline)
            if self == .closing { _ = pool.connectionReleased(connection, reusable: false) }
            return pool
        }
    }

    enum Event: String, CaseIterable, CustomStringConvertible {
        case established, connectFailed, releasedReusable, releasedNotReusable, closed
        var description: String { rawValue }

        func apply(to pool: inout Pool, _ connection: ConnectionID) -> Pool.Action {
            switch self {
            case .established: pool.connectionEstablished(connection)
            case .connectFailed: pool.connectFailed(connection)
            case .releasedReusable: pool.connectionReleased(connection, reusable: true)
            case .releasedNotReusable: pool.connectionReleased(connection, reusable: false)
            case .closed: pool.connectionClosed(connection)
            }
        }
    }

    struct Outcome: Equatable {
        var action: Pool.Action
        /// Connection 0's state after the event.
        var state: Pool.ConnectionState
        var parked: [WaiterID]
    }

    static func expected(_ start: Start, _ event: Event) -> Outcome {
        let first = ConnectionID(0)
        let second = ConnectionID(1)
        let opener = WaiterID(0)
        let parked = WaiterID(1)
        switch (start, event) {
        case (.connecting, .established):
            return Outcome(action: .lease(first, to: opener), state: .leased, parked: [parked])
        case (.connecting, .connectFailed):
            return Outcome(
                action: .failAndOpen(opener, .connectFailed, open: second, for: parked),
                state: .closed,
                parked: []
            )
        case (.connecting, .closed):
            return Outcome(
                action: .failAndOpen(opener, .closedWhileConnecting, open: second, for: parked),
                state: .closed,
                parked: []
            )
        case (.connecting, .releasedReusable), (.connecting, .releasedNotReusable):
            return Outcome(action: .none, state: .connecting(for: opener), parked: [parked])

        case (.idle, .closed):
            return Outcome(action: .none, state: .closed, parked: [])
        case (.idle, _):
            return Outcome(action: .none, state: .idle, parked: [])

        case (.leased, .releasedReusable):
            return Outcome(action: .lease(first, to: parked), state: .leased, parked: [])
        case (.leased, .releasedNotReusable):
            return Outcome(action: .close(first), state: .closing, parked: [parked])
        case (.leased, .closed), (.closing, .closed):
            return Outcome(action: .open(second, for: parked), state: .closed, parked: [])
        case (.leased, .established), (.leased, .connectFailed):
            return Outcome(action: .none, state: .leased, parked: [parked])

        case (.closing, _):
            return Outcome(action: .none, state: .closing, parked: [parked])

        case (.closed, .established):
            // The pool no longer counts it: whoever established it closes it.
            return Outcome(action: .close(first), state: .closed, parked: [])
        case (.closed, _):
            return Outcome(action: .none, state: .closed, parked: [])
        }
    }

    @Test("every connection event in every connection state", arguments: Start.allCases, Event.allCases)
    func everyEvent(start: Start, event: Event) {
        var pool = start.pool()
        let connection = ConnectionID(0)
        if start != .connecting {
            #expect(pool.state(of: connection) == (start == .closing ? .closing : Pool.ConnectionState(start)))
        }
        let action = event.apply(to: &pool, connection)
        let outcome = Outcome(action: action, state: pool.state(of: connection), parked: pool.parkedWaiters)
        #expect(outcome == Self.expected(start, event))
        Self.checkInvariants(pool, known: [ConnectionID(0), ConnectionID(1)])
        // Told again, a close changes nothing more.
        if event == .closed {
            let count = pool.connectionCount
            #expect(pool.connectionClosed(connection) == .none)
            #expect(pool.connectionCount == count)
        }
    }

    // MARK: - Waiters

    @Test("a waiter that times out is removed, exactly that one; one no longer parked is left alone")
    func waiterTimedOut() {
        var pool = Pool(limit: 1)
        _ = pool.leaseRequested(deadline: Self.deadline)
        _ = pool.connectionEstablished(ConnectionID(0))
        for index in 1...3 {
            #expect(pool.leaseRequested(deadline: Self.deadline) == .park(WaiterID(index), until: Self.deadline))
        }
        #expect(pool.waiterTimedOut(WaiterID(2)) == .fail(WaiterID(2), .noConnectionInTime))
        #expect(pool.parkedWaiters == [WaiterID(1), WaiterID(3)])
        #expect(pool.waiterTimedOut(WaiterID(2)) == .none)
        // Waiter 0 holds the connection and was never parked; waiter 9 was never seen.
        #expect(pool.waiterTimedOut(WaiterID(0)) == .none)
        #expect(pool.waiterTimedOut(WaiterID(9)) == .none)
        #expect(pool.connectionReleased(ConnectionID(0), reusable: true) == .lease(ConnectionID(0), to: WaiterID(1)))
        // Served, waiter 1 times out no more.
        #expect(pool.waiterTimedOut(WaiterID(1)) == .none)
        #expect(pool.connectionReleased(ConnectionID(0), reusable: true) == .lease(ConnectionID(0), to: WaiterID(3)))
        #expect(pool.parkedWaiters.isEmpty)
        Self.checkInvariants(pool, known: [ConnectionID(0)])
    }

    /// A pool of one connection, leased, and two parked waiters: waiter 1 until `start` + 1 s, waiter 2 until
    /// `start` + 10 s.
    static func fullPoolWithShortAndLongWaiter(start: NIODeadline) -> Pool {
        var pool = Pool(limit: 1)
        _ = pool.leaseRequested(deadline: start + .seconds(10))
        _ = pool.connectionEstablished(ConnectionID(0))
        #expect(pool.leaseRequested(deadline: start + .seconds(1)) == .park(WaiterID(1), until: start + .seconds(1)))
        #expect(pool.leaseRequested(deadline: start + .seconds(10)) == .park(WaiterID(2), until: start + .seconds(10)))
        return pool
    }

    @Test("room left by a close or a failed connect goes to a waiter with time left, not one whose deadline passed")
    func roomPassesOverExpiredWaiters() {
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var pool = Self.fullPoolWithShortAndLongWaiter(start: start)
        // At start + 2 s waiter 1 has no time left to connect in: the room goes to waiter 2.
        #expect(pool.connectionReleased(ConnectionID(0), reusable: false) == .close(ConnectionID(0)))
        #expect(
            pool.connectionClosed(ConnectionID(0), now: start + .seconds(2)) == .open(ConnectionID(1), for: WaiterID(2))
        )
        #expect(pool.parkedWaiters == [WaiterID(1)])
        // Waiter 2's connect fails at start + 3 s: the room is not handed to waiter 1, past its deadline.
        #expect(pool.connectFailed(ConnectionID(1), now: start + .seconds(3)) == .fail(WaiterID(2), .connectFailed))
        #expect(pool.connectionCount == 0)
        #expect(pool.waiterTimedOut(WaiterID(1)) == .fail(WaiterID(1), .noConnectionInTime))
        // A waiter that comes later finds the room.
        #expect(pool.leaseRequested(deadline: start + .seconds(20)) == .open(ConnectionID(2), for: WaiterID(3)))
        Self.checkInvariants(pool, known: [ConnectionID(0), ConnectionID(1), ConnectionID(2)])
    }

    @Test("a released connection passes over a waiter whose deadline has passed; that one waits for its timeout")
    func releasePassesOverExpiredWaiters() {
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var pool = Self.fullPoolWithShortAndLongWaiter(start: start)
        // At start + 2 s waiter 1 is past its deadline, its timeout not reported yet: waiter 2 gets the connection.
        #expect(
            pool.connectionReleased(ConnectionID(0), reusable: true, now: start + .seconds(2))
                == .lease(ConnectionID(0), to: WaiterID(2))
        )
        #expect(pool.parkedWaiters == [WaiterID(1)])
        #expect(pool.waiterTimedOut(WaiterID(1)) == .fail(WaiterID(1), .noConnectionInTime))
        // With every parked waiter expired, the connection goes idle rather than to a waiter about to fail.
        #expect(pool.leaseRequested(deadline: start + .seconds(3)) == .park(WaiterID(3), until: start + .seconds(3)))
        #expect(pool.connectionReleased(ConnectionID(0), reusable: true, now: start + .seconds(4)) == .none)
        #expect(pool.waiterTimedOut(WaiterID(3)) == .fail(WaiterID(3), .noConnectionInTime))
        #expect(pool.leaseRequested(deadline: start + .seconds(20)) == .lease(ConnectionID(0), to: WaiterID(4)))
        Self.checkInvariants(pool, known: [ConnectionID(0)])
    }

    @Test("a failed connection fails its own waiter and opens one for the first parked waiter")
    func connectFailureWakesTheNextWaiter() {
        var pool = Pool(limit: 2)
        _ = pool.leaseRequested(deadline: Self.deadline)
        _ = pool.leaseRequested(deadline: Self.deadline)
        _ = pool.leaseRequested(deadline: Self.deadline)
        _ = pool.leaseRequested(deadline: Self.deadline)
        #expect(
            pool.connectFailed(ConnectionID(1))
                == .failAndOpen(WaiterID(1), .connectFailed, open: ConnectionID(2), for: WaiterID(2))
        )
        #expect(pool.connectFailed(ConnectionID(1)) == .none)
        #expect(
            pool.connectFailed(ConnectionID(0))
                == .failAndOpen(WaiterID(0), .connectFailed, open: ConnectionID(3), for: WaiterID(3))
        )
        #expect(pool.connectFailed(ConnectionID(2)) == .fail(WaiterID(2), .connectFailed))
        #expect(pool.connectionCount == 1)
        Self.checkInvariants(pool, known: (0..<4).map(ConnectionID.init))
    }

    // MARK: - Shutdown

    @Test("shutdown closes idle connections, fails parked waiters, and lets nothing new in")
    func shutdown() {
        var pool = Pool(limit: 3)
        for _ in 0..<3 { _ = pool.leaseRequested(deadline: Self.deadline) }
        _ = pool.connectionEstablished(ConnectionID(0))
        _ = pool.connectionEstablished(ConnectionID(1))
        _ = pool.connectionReleased(ConnectionID(0), reusable: true)
        // Connection 0 idle, 1 leased, 2 connecting; two waiters parked behind them.
        _ = pool.leaseRequested(deadline: Self.deadline)
        #expect(pool.leaseRequested(deadline: Self.deadline) == .park(WaiterID(4), until: Self.deadline))
        #expect(pool.leaseRequested(deadline: Self.deadline) == .park(WaiterID(5), until: Self.deadline))
        #expect(pool.connectionReleased(ConnectionID(0), reusable: true) == .lease(ConnectionID(0), to: WaiterID(4)))
        _ = pool.connectionReleased(ConnectionID(0), reusable: true)
        _ = pool.connectionReleased(ConnectionID(0), reusable: true)

        let action = pool.shutdown()
        #expect(action == Pool.ShutdownAction(close: [ConnectionID(0)], fail: []))
        #expect(pool.isShutDown)
        #expect(pool.state(of: ConnectionID(0)) == .closing)
        #expect(pool.leaseRequested(deadline: Self.deadline) == .fail(WaiterID(6), .shuttingDown))
        // The connection being opened still serves the request it was opened for, then closes.
        #expect(pool.connectionEstablished(ConnectionID(2)) == .lease(ConnectionID(2), to: WaiterID(2)))
        #expect(pool.connectionReleased(ConnectionID(2), reusable: true) == .close(ConnectionID(2)))
        #expect(pool.connectionReleased(ConnectionID(1), reusable: true) == .close(ConnectionID(1)))
        // Closing connections open nothing for anyone.
        for index in 0..<3 { #expect(pool.connectionClosed(ConnectionID(index)) == .none) }
        #expect(pool.connectionCount == 0)
        #expect(pool.shutdown() == Pool.ShutdownAction())
    }

    @Test("shutdown fails every parked waiter")
    func shutdownFailsWaiters() {
        var pool = Pool(limit: 1)
        _ = pool.leaseRequested(deadline: Self.deadline)
        _ = pool.leaseRequested(deadline: Self.deadline)
        _ = pool.leaseRequested(deadline: Self.deadline)
        #expect(pool.shutdown() == Pool.ShutdownAction(close: [], fail: [WaiterID(1), WaiterID(2)]))
        #expect(pool.parkedWaiters.isEmpty)
        #expect(pool.waiterTimedOut(WaiterID(1)) == .none)
        #expect(pool.connectFailed(ConnectionID(0)) == .fail(WaiterID(0), .connectFailed))
    }

    // MARK: - The two ways a pool lost count

    @Test("waiters that timed out are never handed a connection: released, it goes idle and serves the next")
    func timedOutWaitersLeaveNoLeak() {
        var pool = Pool(limit: 2)
        var known: Set<ConnectionID> = []
        for cycle in 0..<3 {
            // Two requests hold both connections and six wait; all six time out before a connection frees.
            var held: [ConnectionID] = []
            for _ in 0..<2 {
                switch pool.leaseRequested(deadline: Self.deadline) {
                case .open(let connection, _):
                    known.insert(connection)
                    #expect(pool.connectionEstablished(connection) != .none)
                    held.append(connection)
                case .lease(let connection, _):
                    held.append(connection)
                default:
                    Issue.record("cycle \(cycle): a request found no connection")
                }
            }
            let parked = (0..<6).compactMap { _ -> WaiterID? in
                guard case .park(let waiter, _) = pool.leaseRequested(deadline: Self.deadline) else { return nil }
                return waiter
            }
            #expect(parked.count == 6, "cycle \(cycle)")
            for waiter in parked {
                #expect(pool.waiterTimedOut(waiter) == .fail(waiter, .noConnectionInTime))
            }
            for connection in held {
                #expect(pool.connectionReleased(connection, reusable: true) == .none, "cycle \(cycle)")
            }
            Self.checkInvariants(pool, known: known)
            #expect(pool.idleConnections.count == 2, "cycle \(cycle)")
        }
        // The same two connections served every cycle.
        #expect(known.count == 2)
        #expect(pool.connectionCount == 2)
    }

    @Test("a connection reported closed from two places is counted out once, and the limit holds")
    func closeReportedTwice() {
        var pool = Pool(limit: 2)
        var known: [ConnectionID] = []
        /// `count` requests at once, served on idle connections or new ones, then released.
        func serve(_ count: Int) {
            var held: [ConnectionID] = []
            for _ in 0..<count {
                switch pool.leaseRequested(deadline: Self.deadline) {
                case .open(let connection, let waiter):
                    known.append(connection)
                    #expect(pool.connectionEstablished(connection) == .lease(connection, to: waiter))
                    held.append(connection)
                case .lease(let connection, _):
                    held.append(connection)
                default:
                    Issue.record("a request found no connection")
                }
            }
            for connection in held { _ = pool.connectionReleased(connection, reusable: true) }
        }
        // Twenty times: both connections idle, the backend closes them, and each close is reported twice (as the
        // channel goes inactive and as its close future completes) with a request arriving between the reports.
        for _ in 0..<20 {
            serve(2)
            #expect(pool.idleConnections.count == 2)
            for connection in pool.idleConnections {
                #expect(pool.connectionClosed(connection) == .none)
                serve(1)
                #expect(pool.connectionClosed(connection) == .none)
                Self.checkInvariants(pool, known: known)
            }
        }
        serve(2)
        #expect(pool.connectionCount == 2)
        // Full, a third request waits rather than opening a third connection.
        for _ in 0..<2 {
            guard case .lease = pool.leaseRequested(deadline: Self.deadline) else {
                Issue.record("expected an idle connection")
                return
            }
        }
        guard case .park = pool.leaseRequested(deadline: Self.deadline) else {
            Issue.record("a request past the limit did not wait")
            return
        }
        Self.checkInvariants(pool, known: known)
    }

    // MARK: - Random sequences

    /// What a driver knows of the pool, to pick the next event at random among those that can happen.
    struct Driver {
        var connecting: [ConnectionID] = []
        var leased: [ConnectionID] = []
        var closing: [ConnectionID] = []
        var known: [ConnectionID] = []
        var parked: [WaiterID] = []
        var every: [WaiterID] = []
        /// How each waiter ended: true for a connection, false for a failure.
        var outcome: [WaiterID: Bool] = [:]

        mutating func run(_ action: Pool.Action) {
            switch action {
            case .none:
                break
            case .lease(let connection, let waiter):
                end(waiter, served: true)
                leased.append(connection)
                connecting.removeAll { $0 == connection }
            case .open(let connection, let waiter):
                parked.removeAll { $0 == waiter }
                connecting.append(connection)
                known.append(connection)
            case .park(let waiter, _):
                parked.append(waiter)
            case .fail(let waiter, _):
                end(waiter, served: false)
            case .close(let connection):
                leased.removeAll { $0 == connection }
                closing.append(connection)
            case .failAndOpen(let failed, let failure, let connection, let waiter):
                run(.fail(failed, failure))
                run(.open(connection, for: waiter))
            case .failAndLease(let failed, let failure, let connection, let waiter):
                run(.fail(failed, failure))
                run(.lease(connection, to: waiter))
            case .closeAndOpen(let closed, let connection, let waiter):
                run(.close(closed))
                run(.open(connection, for: waiter))
            case .closeAndLease(let closed, let connection, let waiter):
                run(.close(closed))
                run(.lease(connection, to: waiter))
            }
        }

        mutating func end(_ waiter: WaiterID, served: Bool) {
            #expect(outcome[waiter] == nil, "\(waiter) ended twice")
            outcome[waiter] = served
            parked.removeAll { $0 == waiter }
        }
    }

    @Test(
        "random sequences of events keep the limit and the forwards' share, and every waiter ends exactly once",
        arguments: [(1, 1), (2, 2), (3, 3), (5, 5), (2, 1), (4, 2), (5, 1), (5, 3)]
    )
    func randomSequences(limit: Int, forwardLimit: Int) async {
        var random = SplitMix64(seed: 0x9001 &+ UInt64(limit) &+ UInt64(forwardLimit) << 8)
        for _ in 0..<40 {
            await CPUBoundTest.yieldToOtherTests()
            var pool = Pool(limit: limit, forwardLimit: forwardLimit)
            var driver = Driver()
            func pick<T>(_ items: [T]) -> T? {
                items.isEmpty ? nil : items[Int(random.next() % UInt64(items.count))]
            }
            for step in 0..<400 {
                let action: Pool.Action
                switch random.next() % 16 {
                case 0...3:
                    action = pool.leaseRequested(
                        deadline: Self.deadline,
                        for: random.next() % 2 == 0 ? .fill : .forward
                    )
                    if case .park(let waiter, _) = action { driver.every.append(waiter) }
                    if case .lease(_, let waiter) = action { driver.every.append(waiter) }
                    if case .open(_, let waiter) = action { driver.every.append(waiter) }
                    if case .fail(let waiter, _) = action { driver.every.append(waiter) }
                case 4...5:
                    guard let connection = pick(driver.connecting) else { continue }
                    action = pool.connectionEstablished(connection)
                case 6:
                    guard let connection = pick(driver.connecting) else { continue }
                    driver.connecting.removeAll { $0 == connection }
                    action = pool.connectFailed(connection)
                case 7...9:
                    guard let connection = pick(driver.leased) else { continue }
                    driver.leased.removeAll { $0 == connection }
                    action = pool.connectionReleased(connection, reusable: random.next() % 4 != 0)
                case 10...11:
                    guard let connection = pick(driver.closing) else { continue }
                    driver.closing.removeAll { $0 == connection }
                    action = pool.connectionClosed(connection)
                case 12:
                    // The backend closes any connection, in any state, or one already closed: told again.
                    guard let connection = pick(driver.known) else { continue }
                    driver.connecting.removeAll { $0 == connection }
                    driver.leased.removeAll { $0 == connection }
                    driver.closing.removeAll { $0 == connection }
                    action = pool.connectionClosed(connection)
                case 13...14:
                    // A parked waiter's deadline, or a timer that fires late for a waiter served meanwhile.
                    guard let waiter = random.next() % 3 == 0 ? pick(driver.every) : pick(driver.parked) else {
                        continue
                    }
                    action = pool.waiterTimedOut(waiter)
                default:
                    guard random.next() % 20 == 0 else { continue }
                    let shutdown = pool.shutdown()
                    for connection in shutdown.close { driver.closing.append(connection) }
                    for waiter in shutdown.fail { driver.run(.fail(waiter, .shuttingDown)) }
                    action = .none
                }
                driver.run(action)
                Self.checkInvariants(pool, known: driver.known)
                #expect(Set(pool.parkedWaiters) == Set(driver.parked), "step \(step)")
                if pool.connectionCount > pool.limit { return }
            }
            // Everything ends: connections get established, released and closed, parked waiters time out.
            for _ in 0..<10_000 {
                if let connection = driver.connecting.first {
                    driver.run(pool.connectionEstablished(connection))
                } else if let connection = driver.leased.first {
                    driver.leased.removeFirst()
                    driver.run(pool.connectionReleased(connection, reusable: false))
                } else if let connection = driver.closing.first {
                    driver.closing.removeFirst()
                    driver.run(pool.connectionClosed(connection))
                } else if let connection = pool.idleConnections.first {
                    driver.run(pool.connectionClosed(connection))
                } else if let waiter = driver.parked.first {
                    driver.run(pool.waiterTimedOut(waiter))
                } else {
                    break
                }
                Self.checkInvariants(pool, known: driver.known)
            }
            #expect(pool.connectionCount == 0)
            #expect(pool.forwardCount == 0, "a forward's share still held with no connection left")
            #expect(pool.parkedWaiters.isEmpty)
            #expect(driver.every.allSatisfy { driver.outcome[$0] != nil }, "a waiter never ended")
        }
    }
}

extension UpstreamPoolStateMachine.ConnectionState {
    fileprivate init(_ start: UpstreamPoolStateMachineTests.Start) {
        switch start {
        case .connecting: self = .connecting(for: UpstreamPoolStateMachine.WaiterID(0))
        case .idle: self = .idle
        case .leased: self = .leased
        case .closing: self = .closing
        case .closed: self = .closed
        }
    }
}
