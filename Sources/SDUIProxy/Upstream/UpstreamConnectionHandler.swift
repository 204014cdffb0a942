import NIOCore
import NIOSSL
import SDUIProxyCore

/// One keep-alive connection to the backend: one exchange at a time, and its end told to the connection's pool.
/// A cache fill's response is read whole; a forwarded one (``ForwardedExchange``) streams both ways: the request
/// body as the client sends it, the response to the client as it comes, reading paused while the client has not
/// taken what it was given.
///
/// It speaks HTTP/1.1 itself, with no codec handlers in the pipeline: the request goes out as the bytes
/// ``HTTPWireFormat/encodeRequest(method:target:host:headers:body:)`` made, and the answer is read with
/// ``HTTPResponseParser``.
///
/// Confined to its channel's event loop, like its pool: every call and callback happens on that loop.
final class UpstreamConnectionHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum Failure: Error, Equatable {
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

    /// The longest response head accepted from the backend.
    static let maximumResponseHeadBytes = 64 << 10

    /// The exchange in flight, and what its end is told with. The exchange and its caller's completion are kept
    /// here rather than in a callback of the pool's: a closure that captured them would be an allocation on
    /// every exchange.
    private struct Current {
        var exchange: LoopLocalHTTPClient.Exchange
        var retryIfStale: Bool
        var completion: PoolState.Completion
        var head: HTTPResponseParser.Head?
        /// The body's length, when the head gave it.
        var length: Int?
        var body: ByteBuffer?
        /// When the exchange fails unless more arrives: the head's deadline, then the body's idle limit from its
        /// last part.
        var deadline: NIODeadline
        var keepAlive = true
        /// The bytes taken from the exchange's budget, given back when it ends.
        var reserved = 0
    }

    /// The largest body taken as the read buffer's own slice when it arrives whole in one read (see
    /// ``receive(_:)``): what a cache entry copies into its own array anyway.
    static let maximumBorrowedBodyBytes = CachedResponse.maximumExactBodyBytes

    private let eventLoop: any EventLoop
    /// What the pool knows this connection as.
    let id: UpstreamPoolStateMachine.ConnectionID
    /// The pool this connection belongs to, and reports to. A strong reference: the pool holds a
    /// connection only until it is reported closed.
    private let pool: PoolState
    private var context: ChannelHandlerContext?
    private var current: Current?
    private var parser = HTTPResponseParser(maximumHeadBytes: UpstreamConnectionHandler.maximumResponseHeadBytes)
    /// Bytes of a response part that has not arrived whole yet.
    private var pending: ByteBuffer?
    private var reusable = true
    /// One timer per connection, not per exchange: it is armed for the first exchange's deadline and, when it
    /// fires early for a later exchange, re-armed for that one's. Back-to-back exchanges with the same
    /// timeout then schedule one task per timeout period instead of one each.
    private var timer: Scheduled<Void>?
    private var timerDeadline = NIODeadline.distantFuture
    /// The exchange in flight when it is forwarded: kept beside ``current`` so that a fill's parts pay one check.
    private var forwarding: ForwardedExchange?
    /// Whether reading waits for the client to take the parts of a forwarded response it was given, and whether
    /// the channel asked to read meanwhile.
    private var readsPaused = false
    private var readWanted = false
    /// Whether a TLS backend closed without its `close_notify`: the close may be an attacker's, so a body that runs
    /// to it is not taken as whole (RFC 9112 section 9.8).
    private var closedWithoutNotify = false

    init(eventLoop: any EventLoop, pool: PoolState, id: UpstreamPoolStateMachine.ConnectionID) {
        self.eventLoop = eventLoop
        self.pool = pool
        self.id = id
    }

    /// Whether the connection can take another exchange.
    var isUsable: Bool { reusable && current == nil && context?.channel.isActive == true }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        disarmTimer()
    }

    /// Sends `exchange`; the pool is told once, on this connection's loop, when it ends, with the whole response
    /// or the failure, and `completion` to pass it on to.
    func send(
        _ exchange: LoopLocalHTTPClient.Exchange,
        retryIfStale: Bool,
        completion: @escaping PoolState.Completion
    ) {
        let sent = Current(
            exchange: exchange,
            retryIfStale: retryIfStale,
            completion: completion,
            deadline: exchange.deadline
        )
        guard let context else { return end(sent, with: .failure(Failure.closedBeforeResponse)) }
        guard current == nil else { return end(sent, with: .failure(Failure.busy)) }
        current = sent
        parser.expectResponse(isHEAD: exchange.isHEAD)
        forwarding = exchange.forwarding
        guard let forwarding, !forwarding.requestSent else {
            armTimer(for: exchange.deadline)
            context.writeAndFlush(wrapOutboundOut(exchange.request), promise: nil)
            return
        }
        forwarding.connection = self
        // The upload is the client's time (limits.requestTimeout), not the backend's: the backend's deadline starts
        // once the client has sent the whole body. Not once the last part is written: a backend that stopped
        // reading would never let that happen.
        current?.deadline = .distantFuture
        // Flushed at once: a backend may answer the head alone (`100 Continue`, or a refusal) before any body.
        context.writeAndFlush(wrapOutboundOut(exchange.request), promise: nil)
        forwarding.body?.setFinishHandler { [weak self, weak forwarding] in
            guard let self, let forwarding else { return }
            clientBodyEnded(forwarding)
        }
        sendBodyPart(of: forwarding)
    }

    // MARK: Forwarded exchanges: the request body

    /// Writes the body's next part, or its end; each part is written only once the one before it is out, so the
    /// client is read only as fast as the backend takes the body. A body that fails is the exchange's to tell
    /// (``exchangeAbandoned(_:)``).
    private func sendBodyPart(of forwarding: ForwardedExchange) {
        guard let body = forwarding.body else { return }
        body.next().whenSuccess { [self] part in
            guard self.forwarding === forwarding, let context else { return }
            guard let part else { return bodySent(forwarding) }
            // An empty chunk would end the body.
            guard part.readableBytes > 0 else { return eventLoop.execute { self.sendBodyPart(of: forwarding) } }
            let written = eventLoop.makePromise(of: Void.self)
            if forwarding.isChunked {
                var size = context.channel.allocator.buffer(capacity: 18)
                size.writeString(String(part.readableBytes, radix: 16))
                size.writeStaticString("\r\n")
                context.write(wrapOutboundOut(size), promise: nil)
                context.write(wrapOutboundOut(part), promise: nil)
                context.writeAndFlush(wrapOutboundOut(ByteBuffer(staticString: "\r\n")), promise: written)
            } else {
                context.writeAndFlush(wrapOutboundOut(part), promise: written)
            }
            written.futureResult.whenSuccess {
                // The last part: the request is whole in this turn, before an answer to it is read.
                if body.isDrained { return self.bodySent(forwarding) }
                // The next part is asked for in a turn of its own: a body whose parts are all there already would
                // otherwise nest a call per part.
                self.eventLoop.execute { self.sendBodyPart(of: forwarding) }
            }
        }
    }

    private func bodySent(_ forwarding: ForwardedExchange) {
        guard self.forwarding === forwarding, !forwarding.requestSent, let context else { return }
        if forwarding.isChunked {
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(staticString: "0\r\n\r\n")), promise: nil)
        }
        forwarding.requestSent = true
    }

    /// The client has sent the whole body: the backend's time for its answer starts.
    private func clientBodyEnded(_ forwarding: ForwardedExchange) {
        guard self.forwarding === forwarding, current?.head == nil else { return }
        let deadline = eventLoop.now + forwarding.headTimeout
        current?.deadline = deadline
        armTimer(for: deadline)
    }

    /// The exchange's caller gave it up (its client's body failed): the backend must not take what it got for a
    /// shorter request, so the connection closes under it.
    func exchangeAbandoned(_ forwarding: ForwardedExchange) {
        guard self.forwarding === forwarding else { return }
        fail(with: .abandoned, closing: true)
    }

    // MARK: Forwarded exchanges: the response

    /// Passes one part of a forwarded response to the exchange's sink as it comes.
    private func receive(_ part: HTTPResponseParser.Part, forwarding: ForwardedExchange) {
        switch part {
        case .head(let head, let keepAlive, _):
            current?.head = head
            current?.keepAlive = keepAlive
            restartBodyClock()
            forwarding.sink.receiveHead(status: head.status, headers: head.fields.headers)
        case .interim(let head):
            // Passed on as it came; an answer has begun, so the request is not sent again on another connection.
            current?.retryIfStale = false
            forwarding.sink.receiveInterim(status: head.status, headers: head.fields.headers)
        case .body(let part):
            // Until the client takes the part, the backend is not read. The clock, started again as the part
            // came, runs on meanwhile: a client that takes no part for `bodyIdleTimeout` would otherwise hold a
            // connection that cache fills share.
            readsPaused = true
            restartBodyClock()
            forwarding.deliver(part) { [self] result in partTaken(result, of: forwarding) }
        case .end:
            guard let inFlight = current.take() else { return }
            self.forwarding = nil
            resumeReading()
            // A connection whose request did not go out whole cannot carry another.
            if !inFlight.keepAlive || !forwarding.requestSent { close() }
            guard let head = inFlight.head else { return end(inFlight, with: .failure(Failure.closedDuringResponse)) }
            end(
                inFlight,
                with: .success(UpstreamResponse(status: head.status, fields: head.fields, body: ByteBuffer()))
            )
        }
    }

    private func partTaken(_ result: Result<Void, any Error>, of forwarding: ForwardedExchange) {
        guard self.forwarding === forwarding else { return }
        if case .failure = result { return fail(with: .abandoned, closing: true) }
        guard forwarding.partsWithClient == 0 else { return }
        restartBodyClock()
        resumeReading()
    }

    /// The body may go `bodyIdleTimeout` from now without a byte.
    private func restartBodyClock() {
        guard let idle = current?.exchange.bodyIdleTimeout else { return }
        let deadline = eventLoop.now + idle
        current?.deadline = deadline
        armTimer(for: deadline)
    }

    private func resumeReading() {
        readsPaused = false
        if readWanted, let context {
            readWanted = false
            context.read()
        }
    }

    func read(context: ChannelHandlerContext) {
        if readsPaused {
            readWanted = true
        } else {
            context.read()
        }
    }

    private func end(_ inFlight: Current, with result: Result<UpstreamResponse, any Error>) {
        // The body is the caller's from here on; the fetcher stores it (under cache.maxBytes) or passes it on
        // within the same turn of the loop.
        inFlight.exchange.budget?.release(inFlight.reserved)
        pool.exchangeEnded(
            result,
            on: self,
            inFlight.exchange,
            retryIfStale: inFlight.retryIfStale,
            inFlight.completion
        )
    }

    func close() {
        reusable = false
        context?.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        if var earlier = pending {
            pending = nil
            earlier.writeBuffer(&buffer)
            buffer = earlier
        }
        do {
            while reusable, let part = try parser.next(from: &buffer) {
                receive(part)
            }
        } catch {
            // Bytes that answer nothing, or a response that is not HTTP: the connection is out of step.
            fail(with: .malformed(error), closing: true)
            return
        }
        if buffer.readableBytes > 0, reusable { pending = buffer }
    }

    /// Takes one part of the response into the exchange in flight. `current` is changed in place, never copied
    /// out and back: a copy retained its completion, head and body, and made the body's buffer shared while it
    /// grew.
    private func receive(_ part: HTTPResponseParser.Part) {
        if let forwarding { return receive(part, forwarding: forwarding) }
        guard let maxBodyBytes = current?.exchange.maxBodyBytes else { return }
        switch part {
        case .head(let head, let keepAlive, let length):
            if let length, length > maxBodyBytes {
                return fail(with: .tooLarge(maxBodyBytes), closing: true)
            }
            if let length, length > 0, !reserve(length) { return }
            current?.head = head
            current?.keepAlive = keepAlive
            current?.length = length
            // The head is in: from here the body may take as long as it keeps coming. The timer armed for the
            // head's deadline is moved when the idle limit ends sooner; a later end is met when it fires.
            if let idle = current?.exchange.bodyIdleTimeout {
                let deadline = eventLoop.now + idle
                current?.deadline = deadline
                armTimer(for: deadline)
            }
        case .interim(let head):
            // Never stored nor merged into the final response: passed on as it came, or let go. An answer has
            // begun: the request is not sent again, which would pass the client this interim response twice.
            current?.retryIfStale = false
            current?.exchange.interim?.relay(head)
        case .body(var part):
            if let idle = current?.exchange.bodyIdleTimeout { current?.deadline = eventLoop.now + idle }
            // A small body that arrives whole in one read is kept as the read buffer's slice: the exchange
            // completes within this read, and the cache copies the body into its entry, so the slice is gone
            // before the channel reads again and reuses its buffer. Any other body is copied out as it arrives,
            // into one buffer of its own size when the length is known: a slice kept alive across reads would
            // stop the channel reusing its read buffer, and every read would allocate a new one.
            if current?.body == nil, let length = current?.length, part.readableBytes == length,
                length <= Self.maximumBorrowedBodyBytes
            {
                current?.body = part
                return
            }
            if current?.body == nil {
                let capacity = current?.length ?? part.readableBytes
                current?.body = ByteBufferAllocator().buffer(capacity: capacity)
            }
            let size = (current?.body?.readableBytes ?? 0) + part.readableBytes
            guard size <= maxBodyBytes else {
                return fail(with: .tooLarge(maxBodyBytes), closing: true)
            }
            // Without a length the body is taken from the budget as it grows.
            if current?.length == nil, !reserve(part.readableBytes) { return }
            current?.body?.writeBuffer(&part)
        case .end:
            guard let inFlight = current.take() else { return }
            if !inFlight.keepAlive { close() }
            guard let head = inFlight.head else {
                return end(inFlight, with: .failure(Failure.closedDuringResponse))
            }
            end(
                inFlight,
                with: .success(
                    UpstreamResponse(status: head.status, fields: head.fields, body: inFlight.body ?? ByteBuffer())
                )
            )
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        reusable = false
        disarmTimer()
        // The socket is closed: the pool counts the connection out now, before the exchange in flight ends, so
        // a retry of that exchange finds the room the connection left.
        pool.connectionClosed(id)
        if let inFlight = current {
            // A body that runs to the close ends here, unless TLS did not close it; anything else was cut short.
            if parser.bodyEndsWithConnection, !closedWithoutNotify, let part = try? parser.finish() {
                receive(part)
            } else {
                fail(
                    with: inFlight.head == nil ? .closedBeforeResponse : .closedDuringResponse,
                    closing: false
                )
            }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        reusable = false
        // A TLS backend that closed without saying so first: the close that follows decides whether an exchange
        // was cut short, or not answered at all (and may be sent again), as over plain HTTP; but a body that runs
        // to the close is not whole.
        if let error = error as? NIOSSLError, case .uncleanShutdown = error {
            closedWithoutNotify = true
            return context.close(promise: nil)
        }
        if let inFlight = current {
            current = nil
            forwarding = nil
            // A reused connection reset before any byte of the answer arrived: the backend had closed it and
            // refused the request, as when the close itself arrives first, so the request may go once more.
            let unanswered = inFlight.retryIfStale && inFlight.head == nil && pending == nil
            end(inFlight, with: .failure(unanswered ? Failure.closedBeforeResponse : error))
        }
        context.close(promise: nil)
    }

    /// Takes `count` bytes from the exchange's budget; when they do not fit, the exchange fails and its
    /// connection closes, since the rest of the body will not be read.
    private func reserve(_ count: Int) -> Bool {
        guard let budget = current?.exchange.budget else { return true }
        guard budget.reserve(count) else {
            fail(with: .overBudget(budget.limit), closing: true)
            return false
        }
        current?.reserved += count
        return true
    }

    private func fail(with failure: Failure, closing: Bool) {
        let inFlight = current
        current = nil
        if forwarding != nil {
            forwarding = nil
            resumeReading()
        }
        if closing { close() }
        if let inFlight { end(inFlight, with: .failure(failure)) }
    }

    private func armTimer(for deadline: NIODeadline) {
        // An armed timer that fires no later than this deadline is kept; it re-arms itself when it fires.
        if timer != nil, timerDeadline <= deadline { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = eventLoop.scheduleTask(deadline: deadline) { self.timerFired() }
    }

    private func timerFired() {
        timer = nil
        guard let inFlight = current else { return }
        if inFlight.deadline <= eventLoop.now {
            let failure: Failure = inFlight.head == nil ? .timedOut : readsPaused ? .clientStalled : .bodyStalled
            fail(with: failure, closing: true)
        } else if inFlight.deadline != .distantFuture {
            armTimer(for: inFlight.deadline)
        }
    }

    private func disarmTimer() {
        timer?.cancel()
        timer = nil
    }
}
