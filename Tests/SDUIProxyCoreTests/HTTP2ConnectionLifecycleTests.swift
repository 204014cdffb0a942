import NIOCore
import SDUIProxyCore
import Testing

@Suite("The life of an HTTP/2 connection: its idle limit and its drain")
struct HTTP2ConnectionLifecycleTests {
    private static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    private static func at(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }

    private static func lifecycle() -> HTTP2ConnectionLifecycle {
        HTTP2ConnectionLifecycle(now: start, idleTimeout: .seconds(5), pingData: 0xD12A_1A)
    }

    @Test("with no stream ever open, the limit runs from the start: early looks are told when to look again")
    func idleFromTheStart() {
        var connection = Self.lifecycle()
        #expect(connection.firstIdleCheck == Self.at(5))
        #expect(connection.idleTimerFired(now: Self.at(4)) == .checkIdleAgain(at: Self.at(5)))
        #expect(connection.state == .serving)
        #expect(connection.idleTimerFired(now: Self.at(5)) == .goAwayAndClose)
        #expect(connection.state == .closed)
        #expect(connection.idleTimerFired(now: Self.at(60)) == .none, "closed once")
    }

    @Test("an open stream holds the limit off a whole limit at a time; it runs again from the last close")
    func streamsHoldItOff() {
        var connection = Self.lifecycle()
        connection.streamOpened(id: 1)
        connection.streamOpened(id: 3)
        #expect(connection.idleTimerFired(now: Self.at(5)) == .checkIdleAgain(at: Self.at(10)))
        #expect(connection.streamClosed(now: Self.at(6)) == .none)
        #expect(connection.idleTimerFired(now: Self.at(10)) == .checkIdleAgain(at: Self.at(15)), "stream 3 open")
        #expect(connection.streamClosed(now: Self.at(12)) == .none)
        #expect(connection.idleSince == Self.at(12))
        #expect(connection.idleTimerFired(now: Self.at(15)) == .checkIdleAgain(at: Self.at(17)))
        #expect(connection.idleTimerFired(now: Self.at(17)) == .goAwayAndClose)
    }

    @Test("a close that matches no open stream changes nothing")
    func unmatchedClose() {
        var connection = Self.lifecycle()
        #expect(connection.streamClosed(now: Self.at(3)) == .none)
        #expect(connection.openStreams == 0)
        #expect(connection.idleSince == Self.start, "the limit still runs from the start")
    }

    @Test("a drain announces itself with GOAWAY and PING, and after the ACK names the last stream opened")
    func drainWithStreamsOpen() {
        var connection = Self.lifecycle()
        connection.streamOpened(id: 1)
        connection.streamOpened(id: 7)
        connection.streamOpened(id: 5)
        #expect(connection.drainStarted() == .announceDrain(pingData: 0xD12A_1A))
        #expect(connection.drainStarted() == .none, "once")
        #expect(connection.pingAcknowledged(data: 42) == .none, "the client's own PING")
        #expect(connection.state == .announcingDrain)
        #expect(connection.pingAcknowledged(data: 0xD12A_1A) == .finalGoAway(lastStreamID: 7, close: false))
        #expect(connection.state == .draining)
        #expect(connection.streamClosed(now: Self.at(1)) == .none)
        #expect(connection.streamClosed(now: Self.at(2)) == .none)
        #expect(connection.streamClosed(now: Self.at(3)) == .close, "the last stream of the drain")
        #expect(connection.state == .closed)
    }

    @Test("a drain with no stream open closes with the final GOAWAY")
    func drainWithNothingOpen() {
        var connection = Self.lifecycle()
        connection.streamOpened(id: 3)
        #expect(connection.streamClosed(now: Self.at(1)) == .none)
        #expect(connection.drainStarted() == .announceDrain(pingData: 0xD12A_1A))
        #expect(connection.pingAcknowledged(data: 0xD12A_1A) == .finalGoAway(lastStreamID: 3, close: true))
        #expect(connection.state == .closed)
    }

    @Test("a stream closing before the ACK does not close the connection: the client may still be opening one")
    func closeBeforeTheAck() {
        var connection = Self.lifecycle()
        connection.streamOpened(id: 1)
        #expect(connection.drainStarted() == .announceDrain(pingData: 0xD12A_1A))
        #expect(connection.streamClosed(now: Self.at(1)) == .none)
        #expect(connection.state == .announcingDrain)
        connection.streamOpened(id: 3)
        #expect(connection.pingAcknowledged(data: 0xD12A_1A) == .finalGoAway(lastStreamID: 3, close: false))
    }

    @Test("the grace ends a drain, acknowledged or not; the idle limit is the drain's no more")
    func graceEndsTheDrain() {
        var unacknowledged = Self.lifecycle()
        #expect(unacknowledged.drainStarted() == .announceDrain(pingData: 0xD12A_1A))
        #expect(unacknowledged.idleTimerFired(now: Self.at(60)) == .none)
        #expect(unacknowledged.graceRanOut() == .close)
        #expect(unacknowledged.state == .closed)

        var draining = Self.lifecycle()
        draining.streamOpened(id: 1)
        _ = draining.drainStarted()
        _ = draining.pingAcknowledged(data: 0xD12A_1A)
        #expect(draining.graceRanOut() == .close)
        #expect(draining.streamClosed(now: Self.at(1)) == .none, "closed already")

        var serving = Self.lifecycle()
        #expect(serving.graceRanOut() == .none, "no drain, no grace")
    }

    @Test("whatever the order of events, a connection closes at most once, and never for idleness with a stream open")
    func randomSequences() {
        var generator = SplitMix64(seed: 0x4832_4C49_4645)
        for _ in 0..<300 {
            var connection = Self.lifecycle()
            var now = Self.start
            var closes = 0
            var nextID: Int32 = 1
            for _ in 0..<60 {
                now = now + .milliseconds(Int64(generator.next() % 3_000))
                let action: HTTP2ConnectionLifecycle.Action
                switch generator.next() % 6 {
                case 0:
                    connection.streamOpened(id: nextID)
                    nextID += 2
                    action = .none
                case 1: action = connection.streamClosed(now: now)
                case 2: action = connection.idleTimerFired(now: now)
                case 3: action = connection.drainStarted()
                case 4: action = connection.pingAcknowledged(data: generator.next() % 2 == 0 ? 0xD12A_1A : 1)
                default: action = connection.graceRanOut()
                }
                switch action {
                case .goAwayAndClose, .close, .finalGoAway(_, close: true):
                    closes += 1
                    #expect(connection.state == .closed)
                case .checkIdleAgain(let at):
                    #expect(at > now)
                default:
                    break
                }
                if case .goAwayAndClose = action { #expect(connection.openStreams == 0) }
                #expect(connection.openStreams >= 0)
            }
            #expect(closes <= 1)
        }
    }
}
