import NIOCore

/// The life of one HTTP/2 connection of the public listener apart from its streams' exchanges: the idle limit, and
/// the drain (RFC 9113 section 6.8). The connection handler feeds it the streams that open and close, the drain's
/// start, PING acknowledgements and its timers, and runs the action each returns.
///
/// - **Serving.** While no stream is open, the idle limit runs from the last close (or from the start, when the
///   connection's protocol became known). One timer serves it: it is not moved as streams come and go (a client
///   asking for one screen at a time would cost a timer set and cancelled a request); when it fires early, the
///   handler is told when to look again.
/// - **Announcing the drain.** A client may be opening a stream as the GOAWAY leaves, so the first GOAWAY names the
///   highest stream id there is, and a PING follows it.
/// - **Draining.** The PING's ACK says the client has read the first GOAWAY and opens nothing more: the second names
///   the last stream this side opened, and the connection closes when its last stream closes, or when the drain's
///   grace (from its start) runs out, whichever comes first.
public struct HTTP2ConnectionLifecycle: Sendable {
    public enum State: Sendable, Equatable {
        case serving
        case announcingDrain
        case draining
        case closed
    }

    public enum Action: Sendable, Equatable {
        case none
        /// Look at the idle limit again at this time (schedule the timer).
        case checkIdleAgain(at: NIODeadline)
        /// Idle for the whole limit: GOAWAY (last stream id 0: none was processed since) and close once it is out.
        case goAwayAndClose
        /// The drain starts: GOAWAY with the highest stream id, then PING with this payload; start the grace timer.
        case announceDrain(pingData: UInt64)
        /// The client has seen the first GOAWAY: GOAWAY with this last stream id, and close once it is out if
        /// `close` (no stream is open).
        case finalGoAway(lastStreamID: Int32, close: Bool)
        /// Close now (flushing what is written first): the last stream of a drain closed, or the grace ran out.
        case close
    }

    public private(set) var state: State = .serving
    public private(set) var openStreams = 0
    /// The highest id of a stream opened, which the drain's second GOAWAY names.
    public private(set) var lastStreamID: Int32 = 0
    /// When the last stream closed, or the connection started: the idle limit runs from here while none is open.
    public private(set) var idleSince: NIODeadline
    public let idleTimeout: TimeAmount
    /// The payload of the drain's PING, random per connection so that a client cannot acknowledge it unasked.
    public let pingData: UInt64

    /// A connection whose protocol became known at `now`; its idle timer is due at ``firstIdleCheck``.
    public init(now: NIODeadline, idleTimeout: TimeAmount, pingData: UInt64 = .random(in: .min ... .max)) {
        self.idleSince = now
        self.idleTimeout = idleTimeout
        self.pingData = pingData
    }

    public var firstIdleCheck: NIODeadline { idleSince + idleTimeout }

    public mutating func streamOpened(id: Int32) {
        openStreams += 1
        lastStreamID = max(lastStreamID, id)
    }

    public mutating func streamClosed(now: NIODeadline) -> Action {
        // The handler reports only the streams it opened; a close it could not match changes nothing.
        guard openStreams > 0 else { return .none }
        openStreams -= 1
        guard openStreams == 0 else { return .none }
        switch state {
        case .serving:
            idleSince = now
            return .none
        case .draining:
            state = .closed
            return .close
        case .announcingDrain, .closed:
            return .none
        }
    }

    public mutating func idleTimerFired(now: NIODeadline) -> Action {
        guard state == .serving else { return .none }
        guard openStreams == 0 else { return .checkIdleAgain(at: now + idleTimeout) }
        let due = idleSince + idleTimeout
        guard now >= due else { return .checkIdleAgain(at: due) }
        state = .closed
        return .goAwayAndClose
    }

    /// The listener drains (it stopped accepting): a second call, or one after the close, does nothing.
    public mutating func drainStarted() -> Action {
        guard state == .serving else { return .none }
        state = .announcingDrain
        return .announceDrain(pingData: pingData)
    }

    /// The client acknowledged a PING carrying `data`: the drain's moves on; others (the client's own) are no matter.
    public mutating func pingAcknowledged(data: UInt64) -> Action {
        guard state == .announcingDrain, data == pingData else { return .none }
        let close = openStreams == 0
        state = close ? .closed : .draining
        return .finalGoAway(lastStreamID: lastStreamID, close: close)
    }

    public mutating func graceRanOut() -> Action {
        switch state {
        case .announcingDrain, .draining:
            state = .closed
            return .close
        case .serving, .closed:
            return .none
        }
    }
}
