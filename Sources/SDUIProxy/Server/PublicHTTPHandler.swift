import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// One client connection of the public listener, over HTTP/1.1: it parses requests, hands each to its
/// ``RequestExchange`` (routing, bodies, limits, the responders: ``RequestExchangeDriver``), and writes the responses
/// the responders produce. Which part is handled when, whether reading pauses, whether a response closes the
/// connection and what a deadline does are its ``ConnectionStateMachine``'s decisions: HTTP/1.1's framing,
/// pipelining and lingering close. This handler does the I/O they call for.
///
/// Responders write to this handler as their ``ResponseSink``; its ``HTTP1ResponseWriter`` encodes and counts them.
///
/// It reads the connection's bytes itself with ``HTTPRequestParser``, rather than behind a decoding handler: a
/// request then reaches it without passing through another handler, a type-erased wrapper and a buffer of its own,
/// which on a cache hit is a good part of the work. Time is its ``ConnectionClock``'s: the wall clock, or a test's
/// event loop, whose clock the test advances.
final class PublicHTTPHandler: ChannelDuplexHandler, RemovableChannelHandler, RequestExchangeDriver {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let runtime: ProxyRuntime
    /// The context in force when the current request started; refreshed when a reload replaced it.
    var proxy: ProxyContext {
        didSet { contextChanged() }
    }
    /// ``proxy`` without a reference count, for ``withProxy(_:)``.
    private var unretainedProxy: Unmanaged<ProxyContext>
    private var generation: Int
    /// Copied out of the context when it changes. (The router is not: it holds the configuration's arrays and
    /// strings, which every loop shares, and a copy per request would write their reference counts; it is read
    /// through the unretained context instead.)
    private(set) var cacheResponder: CacheResponder

    var machine: ConnectionStateMachine
    /// Read into a local and written back around each call into it, never changed in place: no access to it then
    /// spans a call, and the compiler drops its run-time exclusivity checks (five a request, each as dear as a
    /// small function). A copy is a few words and one reference (its memo of the last head's fields), retained.
    private var parser: HTTPRequestParser
    /// The bytes after the last complete part of a read that ended inside one; the next read is appended.
    private var unparsed: ByteBuffer?
    /// The current request's: its body, its limit, who answers it. Without dynamic exclusivity checks: it is read
    /// and changed on the connection's loop only, by the exchange driver, whose accesses never overlap (the
    /// exchange's methods call nothing that reaches back into it); the checks cost a hit about 180 instructions.
    @exclusivity(unchecked) var exchange: RequestExchange
    /// Encodes, counts and tracks the responses.
    var writer: HTTP1ResponseWriter
    /// Responses written while a read burst is handled are flushed once, when it ends.
    var isHandlingRead = false
    var needsFlush = false
    /// The connection is TLS (behind a TLS handler): requests are forwarded as `https`.
    let isSecure: Bool
    /// The time its deadlines are read in.
    let clock: ConnectionClock
    /// The peer, worked out on the connection's first request that needs it: formatting an address allocates,
    /// and a connection's peer does not change.
    var peer: ClientPeer?
    /// What routing read of the last request head's fields (``RequestExchangeDriver/repeatedRouteFields``).
    let repeatedRouteFields: RepeatedRouteFields? = RepeatedRouteFields()
    /// The single task that wakes the connection at its deadline; it moves only when the deadline comes earlier,
    /// so a request costs a clock read, not a timer allocation and cancellation.
    var wakeUpAt: NIODeadline?
    var scheduledWakeUp: Scheduled<Void>?
    /// A streamed body part was written while the channel was past its high-water mark: completed once the channel
    /// is writable again (or failed when it closes), so that the forward reads no more of the backend meanwhile.
    var writableAgain: EventLoopPromise<Void>?
    var context: ChannelHandlerContext?
    /// The connection's loop, kept after the handler is removed for the responders still holding it.
    var loop: (any EventLoop)?
    /// The loop's ``BusyLoopYielder``, told when a read's answers are flushed; nil when the loops never yield.
    private let yielder: BusyLoopYielder?

    /// Made on the connection's event loop: `buffers` and `requests` are that loop's. `clock` is the wall clock
    /// but in tests, which give their loop's.
    init(
        runtime: ProxyRuntime,
        eventLoop: any EventLoop,
        buffers: ResponseBufferRecycler,
        requests: RequestTally,
        isSecure: Bool = false,
        yielder: BusyLoopYielder? = nil,
        clock: ConnectionClock = .wall
    ) {
        self.isSecure = isSecure
        self.yielder = yielder
        self.clock = clock
        self.runtime = runtime
        // The generation first, then the context, read once: a reload in between leaves an older generation,
        // which the first request sees and refreshes.
        self.generation = runtime.generation
        let proxyContext = runtime.context
        let configuration = proxyContext.configuration
        self.proxy = proxyContext
        self.unretainedProxy = Unmanaged.passUnretained(proxyContext)
        self.cacheResponder = CacheResponder(configuration)
        self.exchange = RequestExchange(maxBodyBytes: configuration.limits.maxBodyBytes)
        self.writer = HTTP1ResponseWriter(requests: requests, buffers: buffers)
        self.machine = ConnectionStateMachine(timeouts: Self.timeouts(configuration), now: clock.now)
        self.loop = eventLoop
        // A head may be as long as the URL and header limits together (plus slack for the request line and
        // whitespace), so ``RequestAdmission`` sees every head it could accept and answers the others with its
        // own 414 or 431.
        let limits = configuration.limits
        self.parser = HTTPRequestParser(maximumHeadBytes: limits.maxURLBytes + limits.maxHeaderBytes + 1024)
    }

    private static func timeouts(_ configuration: ProxyConfiguration) -> ConnectionStateMachine.Timeouts {
        .init(
            idle: configuration.limits.idleTimeout.timeAmount,
            request: configuration.limits.requestTimeout.timeAmount
        )
    }

    private func contextChanged() {
        unretainedProxy = Unmanaged.passUnretained(proxy)
        cacheResponder = CacheResponder(proxy.configuration)
        exchange.maxBodyBytes = proxy.configuration.limits.maxBodyBytes
        machine.timeouts = Self.timeouts(proxy.configuration)
        // listen.trustedProxies may have changed: the peer is judged again.
        peer = nil
    }

    /// Calls `body` with ``proxy``, not retained: for the calls every request makes on it. Every loop shares the
    /// context, and each call through ``proxy`` retained it (or the cache it holds), writing the count from both
    /// processors in turn, three times a hit. Sound because ``proxy`` holds the context, and only this handler
    /// replaces it, on its loop, between requests.
    @inline(__always)
    func withProxy<Result>(_ body: (ProxyContext) -> Result) -> Result {
        unretainedProxy._withUnsafeGuaranteedRef(body)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        updateWakeUp()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        scheduledWakeUp?.cancel()
        scheduledWakeUp = nil
        wakeUpAt = nil
        self.context = nil
        clientGone()
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        var parser = self.parser
        let atRequestStart = parser.isBetweenRequests && unparsed == nil && bytes.readableBytes > 0
        switch machine.bytesArrived(atRequestStart: atRequestStart, now: clock.now) {
        case .ignore: return
        case .handle: break
        case .handleWithDeadline(let deadline): wakeUp(before: deadline)
        }
        if var earlier = unparsed {
            unparsed = nil  // so that `earlier` is the only reference and grows in place
            earlier.writeBuffer(&bytes)
            bytes = earlier
        }
        isHandlingRead = true
        defer { isHandlingRead = false }
        do {
            while let part = try parser.next(from: &bytes) {
                // Written back before the part is answered, which may read it; nothing else changes it.
                self.parser = parser
                let keepsConnectionOpen = parser.headKeepsConnectionOpen
                perform(
                    machine.partReceived(part, keepsConnectionOpen: keepsConnectionOpen, now: clock.now),
                    context: context
                )
                // A handler removed while answering a part (the channel closed under it) reads no more, and
                // nothing is read past a response that ends the connection.
                guard self.context != nil, !machine.ignoresInput else { return }
            }
        } catch {
            self.parser = parser
            // The rest of this read is dropped, and later reads are ignored: the parser's place in the byte
            // stream is lost, and a later read could otherwise be taken for the start of a new request.
            parseFailed(error, context: context)
            return
        }
        self.parser = parser
        if bytes.readableBytes > 0 {
            bytes.discardReadBytes()
            unparsed = bytes
        }
        noteRequestInProgress(context: context)
    }

    /// Starts the request deadline when the connection waits with part of a next request already in: bytes that
    /// came behind a response, or after one was answered in the same read.
    func noteRequestInProgress(context: ChannelHandlerContext) {
        let parser = self.parser
        guard !parser.isBetweenRequests || unparsed != nil, machine.isIdle else { return }
        machine.bytesReceived(now: clock.now)
        updateWakeUp()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
        yielder?.answersFlushed()
        context.fireChannelReadComplete()
    }

    private func flushIfNeeded(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
    }

    private func perform(_ action: ConnectionStateMachine.PartAction, context: ChannelHandlerContext) {
        switch action {
        case .handleHead(let head):
            updateWakeUp()
            startRequest(head, context: context)
        case .handleBody(let part):
            exchangeReceivedBody(part)
        case .handleEnd:
            exchangeReceivedEnd()
        case .drop, .holdBack:
            break
        case .stopReading:
            unparsed = nil
        }
    }

    private func startRequest(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        if runtime.generation != generation {
            generation = runtime.generation
            proxy = runtime.context
        }
        writer.startRequest(
            isHead: head.method.isHEAD,
            accounting: withProxy { proxy in
                RequestAccounting(proxy: proxy, head: head, clientAddress: client.address, clock: context.eventLoop)
            }
        )
        exchangeReceivedHead(head)
    }

    // MARK: What the exchange leaves to the connection

    func bodyTakerFull() {
        machine.bodyTakerFull()
    }

    func bodyTakerReady() {
        if machine.bodyTakerReady() { context?.read() }
    }

    func closeAfterResponse() {
        machine.closeAfterResponse()
    }

    /// Malformed or oversized HTTP: nothing after it can be trusted. While no response has begun, answer it;
    /// then close.
    private func parseFailed(_ failure: HTTPRequestParser.Failure, context: ChannelHandlerContext) {
        unparsed = nil
        proxy.logger.info("malformed request", metadata: ["error": "\(failure)"])
        interrupt(machine.parseFailed(), with: failure.proxyError, context: context)
    }

    /// Ends the request being read with `error`: the responder streaming its body answers (or cuts its answer
    /// short); otherwise the error is the answer.
    func interrupt(
        _ action: ConnectionStateMachine.InterruptionAction,
        with error: ProxyError,
        context: ChannelHandlerContext
    ) {
        switch action {
        case .answerAndClose(let headArrived):
            // A body streaming to the backend fails with the error: its forward answers, or cuts its answer short.
            if exchangeAbandoned(because: error) { return }
            // A response already under way can only be cut short.
            guard !writer.headWritten else { return abort() }
            // Without a head there is no request to answer for: what the writer knows is the one before's.
            if !headArrived { writer.answerWithoutRequest() }
            write(error)
        case .closeAfterResponse:
            // The response under way ends the connection; a body still streaming to the backend cannot be
            // completed, and the backend must not take what came as a whole request.
            exchangeAbandoned(because: error)
        case .close:
            context.closeAfterAnswer(lingering: machine.isDraining ? .whileDraining : .init())
        }
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        if machine.readRequested() { context.read() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if machine.closed() { proxy.logger.debug("the client closed the connection inside a request") }
        // A body streaming to the backend fails; one cut off while it was read whole is let go, and the backend
        // never hears of its request.
        exchangeAbandoned(because: ProxyError(.network, "the client closed the connection"))
        clientGone()
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let waiting = writableAgain {
            writableAgain = nil
            waiting.succeed()
        }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        proxy.logger.debug("connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is ChannelShouldQuiesceEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        // Draining: an idle connection closes now, once what it was sent is out; a busy one answers its request
        // with Connection: close.
        if machine.quiesce() { context.closeAfterAnswer(lingering: .whileDraining) }
    }

    // MARK: Pipelined requests

    /// Hands over the requests pipelined behind the response that just ended, after the current call stack, so
    /// that response's bytes go first.
    func schedulePipelinedRequests() {
        guard let context else { return }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute { loopBound.value.handlePipelinedRequests() }
    }

    private func handlePipelinedRequests() {
        guard let context else { return }
        isHandlingRead = true
        while let action = machine.nextHeldBackPart(now: clock.now) {
            perform(action, context: context)
            guard self.context != nil else { return }
        }
        isHandlingRead = false
        flushIfNeeded(context: context)
        guard !machine.hasHeldBackParts else { return }
        let parser = self.parser
        let requestStarted = !parser.isBetweenRequests || unparsed != nil
        if machine.heldBackPartsHandled(requestStarted: requestStarted, now: clock.now) { context.read() }
        updateWakeUp()
    }
}
