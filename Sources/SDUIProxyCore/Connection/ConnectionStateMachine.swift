import NIOCore
import NIOHTTP1

/// The decisions of one HTTP/1.1 client connection, without I/O: which request part is handled now and which
/// waits, when reading pauses, whether a response closes the connection, what a deadline or a drain does.
/// Its driver (the connection handler) reports events and runs what each returns.
///
/// Requests are answered in order (RFC 9112 §9.3.2). The parts of a request that arrives while an earlier one is
/// still being answered (pipelining) are held back, and reading pauses, until that response has ended.
///
/// A connection has one deadline at a time: while a request is being read (from its first byte to its end,
/// `limits.requestTimeout`), or while it waits for the next request (`limits.idleTimeout`). While a response is
/// being produced there is none: the backend's time is the upstream client's to bound.
///
/// Once a response that closes the connection has begun, or the input could no longer be trusted (malformed,
/// timed out), nothing more the client sends is handled.
public struct ConnectionStateMachine: Sendable {
    /// The two deadlines.
    public struct Timeouts: Sendable, Equatable {
        /// How long a connection may wait for its next request.
        public var idle: TimeAmount
        /// How long a request may take to arrive whole, from its first byte.
        public var request: TimeAmount

        public init(idle: TimeAmount, request: TimeAmount) {
            self.idle = idle
            self.request = request
        }
    }

    /// What a deadline bounds.
    public enum DeadlineKind: Sendable, Equatable {
        /// The wait for the next request.
        case idle
        /// The arrival of the current request.
        case request
    }

    /// The deadline in force.
    public struct Deadline: Sendable, Equatable {
        public var kind: DeadlineKind
        public var at: NIODeadline

        public init(kind: DeadlineKind, at: NIODeadline) {
            self.kind = kind
            self.at = at
        }
    }

    /// Where the connection is.
    enum Phase: Sendable, Equatable {
        /// Waiting for a request; `started` once bytes of it have arrived (its deadline runs from then).
        case waitingForRequest(started: Bool)
        /// A request's head has been handled, its end has not arrived. `responseEnded` when its answer is already
        /// complete (a backend may answer before the body is sent): the rest of the body is read and dropped.
        case readingRequest(responseEnded: Bool)
        /// The request has been read; its response is being produced.
        case responding
        /// The connection ends: nothing more is handled.
        case closed
    }

    /// What to do with a request part.
    public enum PartAction: Equatable {
        /// A new request: route it.
        case handleHead(HTTPRequestHead)
        /// A part of the current request's body.
        case handleBody(ByteBuffer)
        /// The current request is complete.
        case handleEnd
        /// Nothing: the part belongs to a request whose answer has ended, or to nothing that will be answered.
        case drop
        /// Held back until the response in progress has ended; reading pauses meanwhile.
        case holdBack
        /// Stop reading the connection: what the client sends from here on is not handled.
        case stopReading
    }

    /// What to do when a response has ended.
    public enum ResponseEndAction: Equatable {
        /// The connection waits for its next request.
        case waitForRequest
        /// Requests were pipelined behind this one: hand them over (after the response's bytes, so answers stay
        /// in order).
        case handleHeldBack
        /// The request was answered before its body had all arrived: the rest is read and dropped, and whatever
        /// took the body is let go. `readNow` when reading, paused for that taker, resumes now.
        case dropRestOfBody(readNow: Bool)
        /// The response was the last: close once it is written.
        case close
    }

    /// What to do with bytes that arrived.
    public enum BytesAction: Equatable {
        /// Nothing: the client's input is no longer handled.
        case ignore
        /// Parse them.
        case handle
        /// Parse them; they begin a request, whose deadline is now this one.
        case handleWithDeadline(NIODeadline)
    }

    /// What a deadline that came due does.
    public enum TimerAction: Equatable {
        /// Not due (or nothing to time): wake up again at ``deadline``, if any.
        case none
        /// The connection waited too long for a request: close it.
        case closeIdle
        /// The request did not arrive whole in time. `headArrived` says whether there is a request to answer and
        /// account for; the answer (408) closes the connection.
        case requestTimedOut(headArrived: Bool)
        /// A request whose answer has already ended is still being read: close without answering.
        case close
    }

    /// What a request the client could not finish sending (malformed bytes, a closed connection) means for the
    /// response.
    public enum InterruptionAction: Equatable {
        /// No response has begun: answer with an error (`headArrived` says whether there is a request to account
        /// for), then close.
        case answerAndClose(headArrived: Bool)
        /// A response is under way: close once it has ended.
        case closeAfterResponse
        /// Close now: no answer can follow.
        case close
    }

    public private(set) var deadline: Deadline?
    private(set) var phase = Phase.waitingForRequest(started: false)
    /// The deadlines' lengths; a change applies from the next deadline on.
    public var timeouts: Timeouts
    /// Parts of requests pipelined behind the one being answered.
    private var heldBack: CircularBuffer<HTTPServerRequestPart> = []
    /// The current request asked to keep the connection open.
    private var requestKeepsAlive = true
    /// A response's head has been written and its end has not.
    private var responseInProgress = false
    /// The response in progress (or the next) is the connection's last.
    private var closesAfterResponse = false
    /// A drain has begun: the response in progress is the last.
    public private(set) var isDraining = false
    /// What the client sends is no longer handled.
    public private(set) var ignoresInput = false
    /// Reading is paused because the current request's body has no taker right now.
    private var bodyBackPressure = false
    /// A read was asked for while reading was paused.
    private var readPending = false

    public init(timeouts: Timeouts, now: NIODeadline) {
        self.timeouts = timeouts
        self.deadline = Deadline(kind: .idle, at: now + timeouts.idle)
    }

    /// Whether parts are held back behind the response in progress.
    public var hasHeldBackParts: Bool { !heldBack.isEmpty }

    /// Whether a request is being read (its head handled, its end not yet).
    public var isReadingRequest: Bool {
        if case .readingRequest = phase { return true }
        return false
    }

    /// Whether the connection waits for a request with nothing of it received and nothing held back: a drain
    /// may close it at once.
    public var isIdle: Bool {
        phase == .waitingForRequest(started: false) && heldBack.isEmpty && !responseInProgress
    }

    // MARK: Reading

    /// Bytes arrived from the client; `atRequestStart` when nothing of a request was pending before them. The
    /// request deadline runs from a request's first byte, not its parsed head: a head sent slowly, or stopped
    /// half-way, gets its 408 in time. Bytes that wait behind a response are timed when they are handled.
    public mutating func bytesArrived(atRequestStart: Bool, now: @autoclosure () -> NIODeadline) -> BytesAction {
        guard !ignoresInput else { return .ignore }
        guard atRequestStart, phase == .waitingForRequest(started: false), heldBack.isEmpty else { return .handle }
        phase = .waitingForRequest(started: true)
        let at = now() + timeouts.request
        deadline = Deadline(kind: .request, at: at)
        return .handleWithDeadline(at)
    }

    /// Part of a request is in (held over from bytes that came behind a response): its deadline runs from now.
    public mutating func bytesReceived(now: NIODeadline) {
        guard !ignoresInput, phase == .waitingForRequest(started: false), heldBack.isEmpty else { return }
        phase = .waitingForRequest(started: true)
        deadline = Deadline(kind: .request, at: now + timeouts.request)
    }

    /// A request part was parsed from what the client sent.
    ///
    /// - Parameter keepsConnectionOpen: for a head, whether it leaves the connection open, when the parser read it
    ///   from the head's bytes already (``HTTPRequestParser/headKeepsConnectionOpen``); nil to read it from the
    ///   head's fields. A head held back is read from its fields when its turn comes.
    public mutating func partReceived(
        _ part: HTTPServerRequestPart,
        keepsConnectionOpen: Bool? = nil,
        now: @autoclosure () -> NIODeadline
    ) -> PartAction {
        guard !ignoresInput else { return .stopReading }
        if case .head = part, closesAfterResponse || (!requestKeepsAlive && (phase == .responding || isReadingRequest))
        {
            // Behind a response that closes the connection: it could not be answered (RFC 9112 §9.6).
            return stopReading()
        }
        switch phase {
        case .readingRequest:
            return handle(part, keepsConnectionOpen: keepsConnectionOpen, now: now)
        case .waitingForRequest where heldBack.isEmpty:
            return handle(part, keepsConnectionOpen: keepsConnectionOpen, now: now)
        case .waitingForRequest, .responding:
            heldBack.append(part)
            return .holdBack
        case .closed:
            return .stopReading
        }
    }

    /// The next held-back part that can be handled now, and what to do with it; nil when there is none, or when
    /// the next must wait for the response in progress.
    public mutating func nextHeldBackPart(now: @autoclosure () -> NIODeadline) -> PartAction? {
        guard !ignoresInput, !heldBack.isEmpty else { return nil }
        switch phase {
        case .readingRequest, .waitingForRequest:
            // Held back, its head's word on keep-alive is read from its own fields: the parser has moved on.
            return handle(heldBack.removeFirst(), keepsConnectionOpen: nil, now: now)
        case .responding, .closed:
            return nil
        }
    }

    /// The held-back parts have all been handed over. Returns whether to read now (a read was asked for while
    /// reading was paused).
    ///
    /// - Parameter requestStarted: bytes of a further request are already in: its deadline starts now.
    public mutating func heldBackPartsHandled(requestStarted: Bool, now: NIODeadline) -> Bool {
        if requestStarted { bytesReceived(now: now) }
        return resumeReadingIfPossible()
    }

    private mutating func handle(
        _ part: HTTPServerRequestPart,
        keepsConnectionOpen: Bool?,
        now: () -> NIODeadline
    ) -> PartAction {
        switch part {
        case .head(let head):
            guard case .waitingForRequest = phase else {
                // A head inside a request is the parser's bug; nothing after it can be trusted.
                return stopReading()
            }
            phase = .readingRequest(responseEnded: false)
            requestKeepsAlive = keepsConnectionOpen ?? head.keepsConnectionOpen
            if deadline?.kind != .request { deadline = Deadline(kind: .request, at: now() + timeouts.request) }
            return .handleHead(head)
        case .body(let buffer):
            guard case .readingRequest(let responseEnded) = phase else { return .drop }
            return responseEnded ? .drop : .handleBody(buffer)
        case .end:
            guard case .readingRequest(let responseEnded) = phase else { return .drop }
            if responseEnded {
                phase = .waitingForRequest(started: false)
                deadline = Deadline(kind: .idle, at: now() + timeouts.idle)
                return .drop
            }
            phase = .responding
            deadline = nil
            return .handleEnd
        }
    }

    private mutating func stopReading() -> PartAction {
        ignoresInput = true
        heldBack.removeAll()
        return .stopReading
    }

    /// The channel asks for a read. Returns whether to read now; otherwise the read happens when reading resumes.
    public mutating func readRequested() -> Bool {
        guard heldBack.isEmpty, !bodyBackPressure else {
            readPending = true
            return false
        }
        return true
    }

    /// The current request's body has no taker for more: reading pauses.
    public mutating func bodyTakerFull() {
        bodyBackPressure = true
    }

    /// The current request's body taker wants more. Returns whether to read now.
    public mutating func bodyTakerReady() -> Bool {
        bodyBackPressure = false
        return resumeReadingIfPossible()
    }

    private mutating func resumeReadingIfPossible() -> Bool {
        guard readPending, heldBack.isEmpty, !bodyBackPressure else { return false }
        readPending = false
        return true
    }

    // MARK: Responding

    /// A response's head is about to be written. Returns whether it is the connection's last, to say so with
    /// `Connection: close`: the client asked for it, a drain has begun, or the request could not be read whole.
    public mutating func responseStarted() -> Bool {
        responseInProgress = true
        if !requestKeepsAlive || isDraining { closesAfterResponse = true }
        return closesAfterResponse
    }

    /// The response's last byte has been written.
    public mutating func responseEnded(now: NIODeadline) -> ResponseEndAction {
        responseInProgress = false
        guard !closesAfterResponse else {
            phase = .closed
            deadline = nil
            ignoresInput = true
            heldBack.removeAll()
            return .close
        }
        switch phase {
        case .readingRequest:
            phase = .readingRequest(responseEnded: true)
            // Nothing takes the rest of the body: reading paused for its taker resumes.
            bodyBackPressure = false
            return .dropRestOfBody(readNow: resumeReadingIfPossible())
        case .responding:
            phase = .waitingForRequest(started: false)
            deadline = Deadline(kind: .idle, at: now + timeouts.idle)
            return heldBack.isEmpty ? .waitForRequest : .handleHeldBack
        case .waitingForRequest, .closed:
            // An answer without a request (a 408 before any head): the connection ends with it.
            phase = .closed
            deadline = nil
            return .close
        }
    }

    /// The response in progress (or the next one) is the connection's last, and nothing more is read: what
    /// follows the current request can no longer be trusted to be a request.
    public mutating func closeAfterResponse() {
        closesAfterResponse = true
        ignoresInput = true
        heldBack.removeAll()
    }

    // MARK: Interruptions

    /// The deadline may have come due.
    public mutating func timerFired(now: NIODeadline) -> TimerAction {
        guard let deadline, deadline.at <= now else { return .none }
        self.deadline = nil
        switch (deadline.kind, phase) {
        case (.idle, .waitingForRequest(started: false)):
            phase = .closed
            ignoresInput = true
            return .closeIdle
        case (.request, .waitingForRequest(started: true)):
            closeAfterResponse()
            return .requestTimedOut(headArrived: false)
        case (.request, .readingRequest(responseEnded: false)):
            closeAfterResponse()
            return .requestTimedOut(headArrived: true)
        case (.request, .readingRequest(responseEnded: true)):
            phase = .closed
            closeAfterResponse()
            return .close
        case (.idle, _), (.request, _):
            return .none
        }
    }

    /// What the client sent is not HTTP this proxy accepts.
    public mutating func parseFailed() -> InterruptionAction {
        let requestsWaiting = !heldBack.isEmpty
        closeAfterResponse()
        if responseInProgress || phase == .responding {
            // The malformed bytes came behind a request being answered: answer it, then close.
            return .closeAfterResponse
        }
        if requestsWaiting {
            // An answer now would come before those of the requests pipelined ahead of the bad bytes.
            phase = .closed
            return .close
        }
        switch phase {
        case .waitingForRequest:
            return .answerAndClose(headArrived: false)
        case .readingRequest(responseEnded: false):
            return .answerAndClose(headArrived: true)
        case .readingRequest(responseEnded: true):
            phase = .closed
            return .close
        case .responding, .closed:
            phase = .closed
            return .close
        }
    }

    /// A drain has begun. Returns whether to close now: nothing is being read or answered. Otherwise the
    /// response in progress, or the one to the request being read, is the last.
    public mutating func quiesce() -> Bool {
        isDraining = true
        if phase == .readingRequest(responseEnded: true), !responseInProgress {
            // Answered already; what is left of the body need not be read.
            phase = .closed
            closeAfterResponse()
            deadline = nil
            return true
        }
        guard isIdle else {
            if responseInProgress || phase == .responding { closesAfterResponse = true }
            return false
        }
        phase = .closed
        deadline = nil
        ignoresInput = true
        return true
    }

    /// The connection closed. Returns whether it closed inside a request (its body will not come whole).
    public mutating func closed() -> Bool {
        defer {
            phase = .closed
            deadline = nil
            ignoresInput = true
            heldBack.removeAll()
        }
        switch phase {
        case .readingRequest(responseEnded: false), .waitingForRequest(started: true): return true
        default: return false
        }
    }
}
