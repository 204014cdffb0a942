import NIOCore

/// The decisions of one keep-alive connection to the backend, one exchange at a time, without I/O: when an
/// exchange times out and why, when a response is too large, whether the connection can carry another exchange,
/// whether an exchange that failed may be sent again on another connection, and when reading pauses for a client.
/// Its driver (the upstream connection's handler) reports events and runs what each returns.
///
/// A cache fill's response is read whole, within `maxBodyBytes`; a forwarded one streams to its client, one part at
/// a time. Both have one deadline at a time: the head's (the exchange's timeout, or, while a forwarded request's
/// body is still coming from its client, none), then the body's idle limit from the last part (or, for a forward,
/// from the moment its client took the last part).
///
/// Time is given with each event (`now`), so the decisions are tested without a clock.
public struct UpstreamExchangeStateMachine: Sendable {
    /// Why an exchange failed.
    public enum Failure: Error, Equatable, Sendable {
        case closedBeforeResponse
        case closedDuringResponse
        case timedOut
        /// The body stopped arriving for `upstream.bodyIdleTimeout`.
        case bodyStalled
        case tooLarge(Int)
        /// The body would not fit in the exchange's byte budget (its limit).
        case overBudget(Int)
        case busy
        case malformed(HTTPParseFailure)
        /// A forwarded exchange's caller gave it up: its client's body failed, or its client could not take a part.
        case abandoned
        /// A forwarded response's client took no part for `upstream.bodyIdleTimeout`.
        case clientStalled
    }

    /// How an exchange's response is taken.
    public enum Kind: Sendable, Equatable {
        /// Read whole, up to `maxBodyBytes`, for the cache.
        case fill(maxBodyBytes: Int)
        /// Passed to the client part by part; `uploading` while the request's body is still coming from the client.
        case forward(uploading: Bool)
    }

    /// What the driver does.
    public enum Action: Sendable, Equatable {
        case none
        /// Write the request; arm the timer for this deadline, if any.
        case sendRequest(armTimer: NIODeadline?)
        /// Arm the timer for this deadline (a timer armed for an earlier one may stay).
        case armTimer(NIODeadline)
        /// A fill's head: keep it; take `reserve` bytes from the exchange's budget (the declared length), and
        /// arm the timer for the body's idle limit.
        case keepHead(reserve: Int?, armTimer: NIODeadline?)
        /// A forward's head: pass it to the client, and arm the timer for the body's idle limit.
        case passHead(armTimer: NIODeadline?)
        /// Pass the interim response on (or let it go), as it came.
        case passInterim
        /// A fill's body part: append it, taking `reserve` bytes from the budget first (when no length was given).
        case appendBody(reserve: Int?)
        /// A forward's body part: pass it to the client and stop reading until the client has taken it.
        case passBodyPart(armTimer: NIODeadline?)
        /// The client has taken every part: read the backend again.
        case resumeReading(armTimer: NIODeadline?)
        /// The backend closed a body that runs to the close: the response ends here (feed the parser's end).
        case finishBodyAtClose
        /// The exchange ended with its response; close the connection first when it cannot carry another.
        case succeed(closeConnection: Bool)
        /// The exchange failed; close the connection first when asked. `mayResend`: no byte of an answer came, and
        /// the request may go once more on another connection (when the failure says it was not answered).
        case fail(Failure, closeConnection: Bool, mayResend: Bool)
        /// The exchange failed with the error the channel caught, unless `asUnanswered`: a reused connection the
        /// backend reset before any byte of the answer, which is `closedBeforeResponse` (it may be sent again).
        /// The connection closes.
        case failWithCaughtError(asUnanswered: Bool, mayResend: Bool)
        /// Close the connection; the close decides the exchange.
        case close
    }

    /// The exchange in flight.
    struct Exchange: Sendable, Equatable {
        var kind: Kind
        /// Whether a failure before any byte of the answer lets the request go once more, on another connection.
        var retryIfStale: Bool
        var bodyIdleTimeout: TimeAmount?
        /// For forwards: how long the backend has for its head once the client has sent the whole body.
        var headTimeout: TimeAmount
        var deadline: NIODeadline
        var headReceived = false
        var keepAlive = true
        /// The body's length, when the head gave it.
        var length: Int?
        /// The body's bytes so far (fills).
        var bodyBytes = 0
        /// Whether reading waits for the client to take the parts it was given (forwards).
        var readsPaused = false
    }

    enum State: Sendable, Equatable {
        case idle
        case exchanging(Exchange)
    }

    private(set) var state: State = .idle
    /// Whether the connection can carry another exchange: false once it closes or is out of step.
    public private(set) var isReusable = true
    /// Whether a TLS backend closed without its `close_notify`: the close may be an attacker's, so a body that
    /// runs to it is not taken as whole (RFC 9112 section 9.8).
    private var closedWithoutNotify = false

    public init() {}

    /// Whether an exchange is in flight.
    public var isExchanging: Bool {
        if case .exchanging = state { return true }
        return false
    }

    /// Whether the exchange in flight has its head.
    public var hasHead: Bool {
        if case .exchanging(let exchange) = state { return exchange.headReceived }
        return false
    }

    /// Whether reading waits for a client to take what it was given.
    public var readsPaused: Bool {
        if case .exchanging(let exchange) = state { return exchange.readsPaused }
        return false
    }

    /// Whether the exchange in flight may still be sent again on another connection.
    public var mayRetry: Bool {
        if case .exchanging(let exchange) = state { return exchange.retryIfStale }
        return false
    }

    // MARK: Sending

    /// An exchange is to be sent on this connection; `attached` while the connection's handler is in its channel.
    ///
    /// - Parameters:
    ///   - deadline: when the backend's head is due (for a forward whose body is still uploading, from the
    ///     body's end: see ``requestBodyEnded(now:)``).
    ///   - headTimeout: a forward's time for the head once its client has sent the whole body.
    public mutating func sendRequested(
        _ kind: Kind,
        deadline: NIODeadline,
        headTimeout: TimeAmount,
        bodyIdleTimeout: TimeAmount?,
        retryIfStale: Bool,
        attached: Bool
    ) -> Action {
        guard attached, isReusable else {
            return .fail(.closedBeforeResponse, closeConnection: false, mayResend: retryIfStale)
        }
        guard case .idle = state else { return .fail(.busy, closeConnection: false, mayResend: retryIfStale) }
        var exchange = Exchange(
            kind: kind,
            retryIfStale: retryIfStale,
            bodyIdleTimeout: bodyIdleTimeout,
            headTimeout: headTimeout,
            deadline: deadline
        )
        // The upload is the client's time (limits.requestTimeout), not the backend's: the backend's deadline starts
        // once the client has sent the whole body. Not once the last part is written: a backend that stopped
        // reading would never let that happen.
        if case .forward(uploading: true) = kind { exchange.deadline = .distantFuture }
        state = .exchanging(exchange)
        return .sendRequest(armTimer: exchange.deadline == .distantFuture ? nil : exchange.deadline)
    }

    /// A forward's client has sent the whole body: the backend's time for its head starts.
    public mutating func requestBodyEnded(now: NIODeadline) -> Action {
        guard case .exchanging(var exchange) = state, case .forward = exchange.kind, !exchange.headReceived else {
            return .none
        }
        exchange.deadline = now + exchange.headTimeout
        state = .exchanging(exchange)
        return .armTimer(exchange.deadline)
    }

    /// The whole request (a forward's last body part) has been written.
    public mutating func requestBodyWritten() {
        guard case .exchanging(var exchange) = state, case .forward(uploading: true) = exchange.kind else { return }
        exchange.kind = .forward(uploading: false)
        state = .exchanging(exchange)
    }

    // MARK: Receiving

    /// An interim (1xx) response.
    public mutating func interimReceived() -> Action {
        guard case .exchanging(var exchange) = state else { return .none }
        // An answer has begun: the request is not sent again, which would pass the client this interim
        // response twice.
        exchange.retryIfStale = false
        state = .exchanging(exchange)
        return .passInterim
    }

    /// The final response's head, with its framing.
    public mutating func headReceived(keepAlive: Bool, length: Int?, now: NIODeadline) -> Action {
        guard case .exchanging(var exchange) = state else { return .none }
        exchange.headReceived = true
        exchange.keepAlive = keepAlive
        exchange.length = length
        // The head is in: from here the body may take as long as it keeps coming.
        let bodyDeadline = exchange.bodyIdleTimeout.map { now + $0 }
        if let bodyDeadline { exchange.deadline = bodyDeadline }
        switch exchange.kind {
        case .fill(let maxBodyBytes):
            if let length, length > maxBodyBytes {
                return failing(.tooLarge(maxBodyBytes), closeConnection: true)
            }
            state = .exchanging(exchange)
            return .keepHead(reserve: length.flatMap { $0 > 0 ? $0 : nil }, armTimer: bodyDeadline)
        case .forward:
            state = .exchanging(exchange)
            return .passHead(armTimer: bodyDeadline)
        }
    }

    /// A part of the body, `size` bytes.
    public mutating func bodyPartReceived(size: Int, now: NIODeadline) -> Action {
        guard case .exchanging(var exchange) = state else { return .none }
        let bodyDeadline = exchange.bodyIdleTimeout.map { now + $0 }
        if let bodyDeadline { exchange.deadline = bodyDeadline }
        switch exchange.kind {
        case .fill(let maxBodyBytes):
            exchange.bodyBytes += size
            guard exchange.bodyBytes <= maxBodyBytes else {
                return failing(.tooLarge(maxBodyBytes), closeConnection: true)
            }
            state = .exchanging(exchange)
            // A timer armed for an earlier deadline re-arms itself for this one when it fires: no task per part.
            // Without a length the body is taken from the budget as it grows.
            return .appendBody(reserve: exchange.length == nil ? size : nil)
        case .forward:
            // Until the client takes the part, the backend is not read. The clock, started again as the part
            // came, runs on meanwhile: a client that takes no part for `bodyIdleTimeout` would otherwise hold a
            // connection that cache fills share.
            exchange.readsPaused = true
            state = .exchanging(exchange)
            return .passBodyPart(armTimer: bodyDeadline)
        }
    }

    /// A forward's client took a part it was given (`failed`: it could not), and now holds
    /// `partsWithClient` parts not yet taken.
    public mutating func bodyPartTaken(failed: Bool, partsWithClient: Int, now: NIODeadline) -> Action {
        guard case .exchanging(var exchange) = state, case .forward = exchange.kind else { return .none }
        if failed { return failing(.abandoned, closeConnection: true) }
        guard partsWithClient == 0 else { return .none }
        let bodyDeadline = exchange.bodyIdleTimeout.map { now + $0 }
        if let bodyDeadline { exchange.deadline = bodyDeadline }
        exchange.readsPaused = false
        state = .exchanging(exchange)
        return .resumeReading(armTimer: bodyDeadline)
    }

    /// The response ended.
    public mutating func responseEnded() -> Action {
        guard case .exchanging(let exchange) = state else { return .none }
        state = .idle
        var closing = !exchange.keepAlive
        // A connection whose request did not go out whole cannot carry another.
        if case .forward(uploading: true) = exchange.kind { closing = true }
        if closing { isReusable = false }
        guard exchange.headReceived else {
            return .fail(.closedDuringResponse, closeConnection: closing, mayResend: exchange.retryIfStale)
        }
        return .succeed(closeConnection: closing)
    }

    /// The budget refused bytes `reserve` asked for (its `limit`): the rest of the body will not be read.
    public mutating func budgetExceeded(limit: Int) -> Action {
        failing(.overBudget(limit), closeConnection: true)
    }

    /// Bytes that answer nothing, or a response that is not HTTP: the connection is out of step.
    public mutating func malformedResponse(_ failure: HTTPParseFailure) -> Action {
        failing(.malformed(failure), closeConnection: true)
    }

    /// A forward's caller gave the exchange up (its client's body failed): the backend must not take what it got
    /// for a shorter request, so the connection closes under it.
    public mutating func exchangeAbandoned() -> Action {
        failing(.abandoned, closeConnection: true)
    }

    // MARK: Time and the connection's end

    /// The timer fired.
    public mutating func timerFired(now: NIODeadline) -> Action {
        guard case .exchanging(let exchange) = state else { return .none }
        if exchange.deadline <= now {
            let failure: Failure =
                !exchange.headReceived ? .timedOut : exchange.readsPaused ? .clientStalled : .bodyStalled
            return failing(failure, closeConnection: true)
        }
        return exchange.deadline == .distantFuture ? .none : .armTimer(exchange.deadline)
    }

    /// The connection is being closed (by its pool, or by an action): it takes no other exchange.
    public mutating func closing() {
        isReusable = false
    }

    /// The channel closed; `bodyEndsWithConnection` when the parser reads a body that runs to the close.
    public mutating func channelClosed(bodyEndsWithConnection: Bool) -> Action {
        isReusable = false
        guard case .exchanging(let exchange) = state else { return .none }
        // A body that runs to the close ends here, unless TLS did not close it; anything else was cut short.
        if bodyEndsWithConnection, !closedWithoutNotify { return .finishBodyAtClose }
        return ending(exchange, with: exchange.headReceived ? .closedDuringResponse : .closedBeforeResponse)
    }

    /// The body that ran to the close could not be finished (it was cut short).
    public mutating func bodyAtCloseIncomplete() -> Action {
        guard case .exchanging(let exchange) = state else { return .none }
        return ending(exchange, with: exchange.headReceived ? .closedDuringResponse : .closedBeforeResponse)
    }

    /// The channel caught an error: `uncleanTLSShutdown` for a TLS backend that closed without saying so first,
    /// and `bytesPending` when part of a response had arrived unparsed.
    public mutating func errorCaught(uncleanTLSShutdown: Bool, bytesPending: Bool) -> Action {
        isReusable = false
        // The close that follows decides whether an exchange was cut short, or not answered at all (and may be
        // sent again), as over plain HTTP; but a body that runs to the close is not whole.
        if uncleanTLSShutdown {
            closedWithoutNotify = true
            return .close
        }
        guard case .exchanging(let exchange) = state else { return .close }
        state = .idle
        // A reused connection reset before any byte of the answer arrived: the backend had closed it and refused
        // the request, as when the close itself arrives first, so the request may go once more.
        return .failWithCaughtError(
            asUnanswered: exchange.retryIfStale && !exchange.headReceived && !bytesPending,
            mayResend: exchange.retryIfStale
        )
    }

    private mutating func failing(_ failure: Failure, closeConnection: Bool) -> Action {
        if closeConnection { isReusable = false }
        guard case .exchanging(let exchange) = state else { return closeConnection ? .close : .none }
        state = .idle
        return .fail(failure, closeConnection: closeConnection, mayResend: exchange.retryIfStale)
    }

    /// The exchange ends with `failure` as the channel closes (it closes already).
    private mutating func ending(_ exchange: Exchange, with failure: Failure) -> Action {
        state = .idle
        return .fail(failure, closeConnection: false, mayResend: exchange.retryIfStale)
    }
}
