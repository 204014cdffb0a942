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

    typealias Failure = UpstreamExchangeStateMachine.Failure

    /// The longest response head accepted from the backend.
    static let maximumResponseHeadBytes = 64 << 10

    /// The exchange in flight, and what its end is told with: the data the handler carries for it. What happens
    /// to it is ``UpstreamExchangeStateMachine``'s to decide. The exchange and its caller's completion are kept
    /// here rather than in a callback of the pool's: a closure that captured them would be an allocation on every
    /// exchange.
    ///
    /// A class, one allocation an exchange: as a struct, the optional that holds it was destroyed through its
    /// type's metadata, a generic walk of each of its fields' value witnesses, about 500 instructions an exchange
    /// more than the allocation and release cost (a pass-through GET, callgrind: 99,783 -> 99,281).
    private final class Current {
        let exchange: LoopLocalHTTPClient.Exchange
        let completion: PoolState.Completion
        var head: HTTPResponseParser.Head?
        var body: ByteBuffer?
        /// The body's length, when the head gave it.
        var length: Int?
        /// The bytes taken from the exchange's budget, given back when it ends.
        var reserved = 0

        init(exchange: LoopLocalHTTPClient.Exchange, completion: @escaping PoolState.Completion) {
            self.exchange = exchange
            self.completion = completion
        }
    }

    /// The largest body taken as the read buffer's own slice when it arrives whole in one read (see
    /// ``receive(_:)``): what a cache entry copies into its own array anyway.
    static let maximumBorrowedBodyBytes = CachedResponse.maximumExactBodyBytes

    private let eventLoop: any EventLoop
    /// What the pool knows this connection as.
    let id: UpstreamPoolStateMachine.ConnectionID
    /// The pool this connection belongs to, and reports to. Not kept alive by the connection: a pool that is gone
    /// (its client shut down) has nothing left to learn.
    private weak var pool: (any UpstreamConnectionEvents)?
    private var context: ChannelHandlerContext?
    /// The decisions: deadlines, limits, keep-alive, retries, reading paused for a client.
    ///
    /// Changed only through ``changeState(_:)``, on a copy written back, and its computed properties read through
    /// ``stateNow`` (its stored ones are read in place, which spans no call): no access to it spans a call into
    /// SDUIProxyCore, so it needs no run-time exclusivity checks (six a forward). It holds no references.
    private var state = UpstreamExchangeStateMachine()
    private var current: Current?
    /// Read into a local and written back around each call into it, never changed in place, as
    /// `PublicHTTPHandler`'s request parser is: no access to it spans a call, so it needs no run-time exclusivity
    /// checks. It holds no references.
    private var parser = HTTPResponseParser(maximumHeadBytes: UpstreamConnectionHandler.maximumResponseHeadBytes)
    /// Bytes of a response part that has not arrived whole yet.
    private var pending: ByteBuffer?
    /// One timer per connection, not per exchange: it is armed for the first exchange's deadline and, when it
    /// fires early for a later exchange, re-armed for that one's. Back-to-back exchanges with the same
    /// timeout then schedule one task per timeout period instead of one each.
    private var timer: Scheduled<Void>?
    private var timerDeadline = NIODeadline.distantFuture
    /// The exchange in flight when it is forwarded: kept beside ``current`` so that a fill's parts pay one check.
    private var forwarding: ForwardedExchange?
    /// Whether the channel asked to read while reading waited for a client.
    private var readWanted = false

    init(eventLoop: any EventLoop, pool: any UpstreamConnectionEvents, id: UpstreamPoolStateMachine.ConnectionID) {
        self.eventLoop = eventLoop
        self.pool = pool
        self.id = id
    }

    /// Whether the connection can take another exchange.
    var isUsable: Bool { state.isReusable && current == nil && context?.channel.isActive == true }

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
        let uploading = exchange.forwarding.map { !$0.requestSent }
        let sent = Current(exchange: exchange, completion: completion)
        let action = changeState { state in
            state.sendRequested(
                uploading.map { .forward(uploading: $0) } ?? .fill(maxBodyBytes: exchange.maxBodyBytes),
                deadline: exchange.deadline,
                headTimeout: exchange.forwarding?.headTimeout ?? .zero,
                bodyIdleTimeout: exchange.bodyIdleTimeout,
                retryIfStale: retryIfStale,
                attached: context != nil
            )
        }
        guard case .sendRequest(let deadline) = action, let context else {
            if case .fail(let failure, _, let mayResend) = action {
                end(sent, with: .failure(failure), retryIfStale: mayResend)
            }
            return
        }
        current = sent
        var parser = self.parser
        parser.expectResponse(isHEAD: exchange.isHEAD)
        self.parser = parser
        forwarding = exchange.forwarding
        if let deadline { armTimer(for: deadline) }
        // Flushed at once: a backend may answer the head alone (`100 Continue`, or a refusal) before any body.
        context.writeAndFlush(wrapOutboundOut(exchange.request), promise: nil)
        guard let forwarding, uploading == true else { return }
        forwarding.connection = self
        forwarding.body?.setFinishHandler { [weak self, weak forwarding] in
            guard let self, let forwarding, self.forwarding === forwarding else { return }
            run(changeState { $0.requestBodyEnded(now: eventLoop.now) })
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
        changeState { $0.requestBodyWritten() }
    }

    /// The exchange's caller gave it up (its client's body failed): the backend must not take what it got for a
    /// shorter request, so the connection closes under it.
    func exchangeAbandoned(_ forwarding: ForwardedExchange) {
        guard self.forwarding === forwarding else { return }
        run(changeState { $0.exchangeAbandoned() })
    }

    // MARK: Reading the response

    func read(context: ChannelHandlerContext) {
        if stateNow.readsPaused {
            readWanted = true
        } else {
            context.read()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        if var earlier = pending {
            pending = nil
            earlier.writeBuffer(&buffer)
            buffer = earlier
        }
        var parser = self.parser
        do {
            while state.isReusable, let part = try parser.next(from: &buffer) {
                // Written back before the part is taken in, which may expect the next response.
                self.parser = parser
                receive(part)
                parser = self.parser
            }
        } catch {
            self.parser = parser
            run(changeState { $0.malformedResponse(error) })
            return
        }
        self.parser = parser
        if buffer.readableBytes > 0, state.isReusable { pending = buffer }
    }

    /// Takes one part of the response into the exchange in flight. `current` is changed in place, never copied
    /// out and back: a copy retained its completion, head and body, and made the body's buffer shared while it
    /// grew.
    private func receive(_ part: HTTPResponseParser.Part) {
        switch part {
        case .head(let head, let keepAlive, let length):
            switch changeState({ $0.headReceived(keepAlive: keepAlive, length: length, now: eventLoop.now) }) {
            case .keepHead(let reserve, let deadline):
                if let reserve, !self.reserve(reserve) { return }
                current?.head = head
                current?.length = length
                // The timer armed for the head's deadline is moved when the idle limit ends sooner; a later end is
                // met when it fires.
                if let deadline { armTimer(for: deadline) }
            case .passHead(let deadline):
                current?.head = head
                if let deadline { armTimer(for: deadline) }
                forwarding?.sink.receiveHead(status: head.status, fields: head.fields, bodyLength: length)
            case let action:
                run(action)
            }
        case .interim(let head):
            guard case .passInterim = changeState({ $0.interimReceived() }) else { return }
            // Never stored nor merged into the final response: passed on as it came, or let go.
            if let forwarding {
                forwarding.sink.receiveInterim(status: head.status, headers: head.fields.headers)
            } else {
                current?.exchange.interim?.relay(head)
            }
        case .body(let part):
            switch changeState({ $0.bodyPartReceived(size: part.readableBytes, now: eventLoop.now) }) {
            case .appendBody(let reserve):
                if let reserve, !self.reserve(reserve) { return }
                append(part)
            case .passBodyPart(let deadline):
                if let deadline { armTimer(for: deadline) }
                guard let forwarding else { return }
                forwarding.deliver(part, from: self)
            case let action:
                run(action)
            }
        case .end:
            run(changeState { $0.responseEnded() })
        }
    }

    /// Appends a part of a fill's body.
    private func append(_ part: ByteBuffer) {
        var part = part
        // A small body that arrives whole in one read is kept as the read buffer's slice: the exchange completes
        // within this read, and the cache copies the body into its entry, so the slice is gone before the channel
        // reads again and reuses its buffer. Any other body is copied out as it arrives, into one buffer of its
        // own size when the length is known: a slice kept alive across reads would stop the channel reusing its
        // read buffer, and every read would allocate a new one.
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
        current?.body?.writeBuffer(&part)
    }

    /// The client took a body part of `forwarding`'s, or could not (``ForwardedExchange/deliver(_:from:)``).
    func partTaken(_ result: Result<Void, any Error>, of forwarding: ForwardedExchange) {
        guard self.forwarding === forwarding else { return }
        let failed: Bool
        if case .failure = result { failed = true } else { failed = false }
        run(
            changeState {
                $0.bodyPartTaken(failed: failed, partsWithClient: forwarding.partsWithClient, now: eventLoop.now)
            }
        )
    }

    private func resumeReading() {
        if readWanted, let context {
            readWanted = false
            context.read()
        }
    }

    // MARK: The connection's end

    func channelInactive(context: ChannelHandlerContext) {
        disarmTimer()
        // Read from a copy, as every access to the parser is (see ``parser``).
        let parserNow = parser
        let bodyEndsWithConnection = parserNow.bodyEndsWithConnection
        let action = changeState { $0.channelClosed(bodyEndsWithConnection: bodyEndsWithConnection) }
        // The socket is closed: the pool counts the connection out now, before the exchange in flight ends, so
        // a retry of that exchange finds the room the connection left.
        pool?.connectionClosed(id)
        switch action {
        case .finishBodyAtClose:
            // Copied after the pool heard of the close, so that nothing it did in between is written over.
            var parser = self.parser
            let part = try? parser.finish()
            self.parser = parser
            if let part {
                receive(part)
            } else {
                run(changeState { $0.bodyAtCloseIncomplete() })
            }
        case let action:
            run(action)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        var unclean = false
        if let error = error as? NIOSSLError, case .uncleanShutdown = error { unclean = true }
        switch changeState({ $0.errorCaught(uncleanTLSShutdown: unclean, bytesPending: pending != nil) }) {
        case .failWithCaughtError(let asUnanswered, let mayResend):
            endCurrent(with: .failure(asUnanswered ? Failure.closedBeforeResponse : error), retryIfStale: mayResend)
            context.close(promise: nil)
        case let action:
            run(action)
        }
    }

    func close() {
        changeState { $0.closing() }
        context?.close(promise: nil)
    }

    // MARK: Running the state machine's actions

    /// Runs `change` on a copy of ``state`` and writes the copy back (see ``state``).
    @inline(__always)
    private func changeState<Result>(_ change: (inout UpstreamExchangeStateMachine) -> Result) -> Result {
        var state = self.state
        let result = change(&state)
        self.state = state
        return result
    }

    /// A copy of ``state``, for its computed properties (see ``state``).
    private var stateNow: UpstreamExchangeStateMachine { state }

    private func run(_ action: UpstreamExchangeStateMachine.Action) {
        switch action {
        case .none, .keepHead, .passHead, .passInterim, .appendBody, .passBodyPart, .sendRequest,
            .finishBodyAtClose:
            // Taken where the event is reported, with the data that goes with them.
            break
        case .armTimer(let deadline):
            armTimer(for: deadline)
        case .resumeReading(let deadline):
            if let deadline { armTimer(for: deadline) }
            resumeReading()
        case .succeed(let closeConnection):
            if closeConnection { close() }
            guard let head = current?.head else { return }
            let body = current?.body ?? ByteBuffer()
            endCurrent(
                with: .success(UpstreamResponse(status: head.status, fields: head.fields, body: body)),
                retryIfStale: false
            )
        case .fail(let failure, let closeConnection, let mayResend):
            if closeConnection { close() }
            endCurrent(with: .failure(failure), retryIfStale: mayResend)
        case .failWithCaughtError:
            // Only errorCaught returns it, with the error in hand.
            break
        case .close:
            close()
        }
    }

    /// Ends the exchange in flight, if any: reading resumes (a forward may have paused it), and the pool is told.
    private func endCurrent(with result: Result<UpstreamResponse, any Error>, retryIfStale: Bool) {
        guard let inFlight = current.take() else { return }
        if forwarding != nil {
            forwarding = nil
            resumeReading()
        }
        end(inFlight, with: result, retryIfStale: retryIfStale)
    }

    private func end(_ inFlight: Current, with result: Result<UpstreamResponse, any Error>, retryIfStale: Bool) {
        // The body is the caller's from here on; the fetcher stores it (under cache.maxBytes) or passes it on
        // within the same turn of the loop.
        inFlight.exchange.budget?.release(inFlight.reserved)
        guard let pool else {
            // The client shut down: no one waits for a connection any more, but the caller still does.
            return inFlight.completion(result.mapError { PoolState.proxyError($0) })
        }
        pool.exchangeEnded(result, on: self, inFlight.exchange, retryIfStale: retryIfStale, inFlight.completion)
    }

    /// Takes `count` bytes from the exchange's budget; when they do not fit, the exchange fails and its
    /// connection closes, since the rest of the body will not be read.
    private func reserve(_ count: Int) -> Bool {
        guard let budget = current?.exchange.budget else { return true }
        guard budget.reserve(count) else {
            run(changeState { $0.budgetExceeded(limit: budget.limit) })
            return false
        }
        current?.reserved += count
        return true
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
        run(changeState { $0.timerFired(now: eventLoop.now) })
    }

    private func disarmTimer() {
        timer?.cancel()
        timer = nil
    }
}
