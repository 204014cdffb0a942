import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// One client connection of the public listener, over HTTP/1.1: it parses requests, routes each, hands it to a
/// responder, and writes the responses the responders produce. Which part is handled when, whether reading
/// pauses, whether a response closes the connection and what a deadline does are its
/// ``ConnectionStateMachine``'s decisions; this handler does the I/O they call for.
///
/// A request goes where the ``RequestRouter`` sends it: GET and HEAD to the ``CacheResponder`` once the request
/// has been read, other methods to the ``PassThroughResponder`` once the body has been read whole (in memory, or a
/// temporary file past `limits.requestBufferBytes`: ``RequestBodyBuffer``), or at once with the body streamed on a
/// route that says `stream: true`, queued write routes to the ``QueuedWriteResponder`` once the body has been read
/// whole, refusals answered here. Responders
/// write to this handler as their ``ResponseSink``; its ``HTTP1ResponseWriter`` encodes and counts them.
///
/// It reads the connection's bytes itself with ``HTTPRequestParser``, rather than behind a decoding handler: a
/// request then reaches it without passing through another handler, a type-erased wrapper and a buffer of its own,
/// which on a cache hit is a good part of the work.
final class PublicHTTPHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// What becomes of the current request's body, and who answers it when its end arrives. The large payloads
    /// are boxed, so that the cache path's value stays a reference and a tag.
    enum RequestBody {
        /// Nothing more to do: the request has been answered, or is being answered.
        case none
        /// Dropped; the cache responder answers at the end.
        case answerFromCache(CacheRequest)
        /// Dropped; the error answers at the end.
        indirect case refuse(ProxyError)
        /// Streamed to the backend (nil when the request has no body); the pass-through responder answers.
        case forward(RequestBodyStream?)
        /// Read whole before it is forwarded: the pass-through responder is handed it at the end.
        indirect case buffer(BufferedForward)
        /// Held whole, up to `limit`, for the queued write responder at the end.
        indirect case collectWrite(QueuedWriteResponder.Write, limit: Int)
        /// Dropped; the queued write's public status answers at the end.
        indirect case answerQueueStatus(id: String)
    }

    /// A forward whose body is being read whole, and what it is forwarded with once it is.
    struct BufferedForward {
        let head: HTTPRequestHead
        let target: RequestTarget
        let platform: String
        let annotation: CacheAnnotation?
        let buffer: RequestBodyBuffer
    }

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
    private var cacheResponder: CacheResponder
    private var maxBodyBytes: Int

    var machine: ConnectionStateMachine
    private var parser: HTTPRequestParser
    /// The bytes after the last complete part of a read that ended inside one; the next read is appended.
    private var unparsed: ByteBuffer?
    var requestBody = RequestBody.none
    /// Bytes of the current request's body so far, against `limits.maxBodyBytes`.
    private var requestBodyBytes = 0
    /// Encodes, counts and tracks the responses.
    var writer: HTTP1ResponseWriter
    /// Responses written while a read burst is handled are flushed once, when it ends.
    var isHandlingRead = false
    var needsFlush = false
    /// The peer, worked out on the connection's first request that needs it: formatting an address allocates,
    /// and a connection's peer does not change.
    var peer: ClientPeer?
    /// The single task that wakes the connection at its deadline; it moves only when the deadline comes earlier,
    /// so a request costs a clock read, not a timer allocation and cancellation.
    var wakeUpAt: NIODeadline?
    var scheduledWakeUp: Scheduled<Void>?
    var context: ChannelHandlerContext?
    /// The connection's loop, kept after the handler is removed for the responders still holding it.
    var loop: (any EventLoop)?

    /// Made on the connection's event loop: `buffers` and `requests` are that loop's.
    init(runtime: ProxyRuntime, buffers: ResponseBufferRecycler, requests: RequestTally) {
        self.runtime = runtime
        // The generation first, then the context, read once: a reload in between leaves an older generation,
        // which the first request sees and refreshes.
        self.generation = runtime.generation
        let proxyContext = runtime.context
        let configuration = proxyContext.configuration
        self.proxy = proxyContext
        self.unretainedProxy = Unmanaged.passUnretained(proxyContext)
        self.cacheResponder = CacheResponder(configuration)
        self.maxBodyBytes = configuration.limits.maxBodyBytes
        self.writer = HTTP1ResponseWriter(requests: requests, buffers: buffers)
        self.machine = ConnectionStateMachine(timeouts: Self.timeouts(configuration), now: .now())
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
        maxBodyBytes = proxy.configuration.limits.maxBodyBytes
        machine.timeouts = Self.timeouts(proxy.configuration)
        // listen.trustedProxies may have changed: the peer is judged again.
        peer = nil
    }

    /// Calls `body` with ``proxy``, not retained: for the calls every request makes on it. Every loop shares the
    /// context, and each call through ``proxy`` retained it (or the cache it holds), writing the count from both
    /// processors in turn, three times a hit. Sound because ``proxy`` holds the context, and only this handler
    /// replaces it, on its loop, between requests.
    @inline(__always)
    private func withProxy<Result>(_ body: (ProxyContext) -> Result) -> Result {
        unretainedProxy._withUnsafeGuaranteedRef(body)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.loop = context.eventLoop
        updateWakeUp()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        scheduledWakeUp?.cancel()
        scheduledWakeUp = nil
        wakeUpAt = nil
        self.context = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        let atRequestStart = parser.isBetweenRequests && unparsed == nil && bytes.readableBytes > 0
        switch machine.bytesArrived(atRequestStart: atRequestStart, now: NIODeadline.now()) {
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
                perform(machine.partReceived(part, now: NIODeadline.now()), context: context)
                // A handler removed while answering a part (the channel closed under it) reads no more, and
                // nothing is read past a response that ends the connection.
                guard self.context != nil, !machine.ignoresInput else { return }
            }
        } catch {
            // The rest of this read is dropped, and later reads are ignored: the parser's place in the byte
            // stream is lost, and a later read could otherwise be taken for the start of a new request.
            parseFailed(error, context: context)
            return
        }
        if bytes.readableBytes > 0 {
            bytes.discardReadBytes()
            unparsed = bytes
        }
        noteRequestInProgress(context: context)
    }

    /// Starts the request deadline when the connection waits with part of a next request already in: bytes that
    /// came behind a response, or after one was answered in the same read.
    func noteRequestInProgress(context: ChannelHandlerContext) {
        guard !parser.isBetweenRequests || unparsed != nil, machine.isIdle else { return }
        machine.bytesReceived(now: NIODeadline.now())
        updateWakeUp()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
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
            receiveBody(part)
        case .handleEnd:
            endRequest(context: context)
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
        // Reset here, not only at the end: the end of a request answered early is dropped, not handled.
        requestBodyBytes = 0
        writer.startRequest(
            isHead: head.method == .HEAD,
            accounting: withProxy { proxy in RequestAccounting(proxy: proxy, head: head, clientAddress: client.address)
            }
        )
        switch withProxy({ proxy in proxy.router.route(head) }) {
        case .cache(let request):
            requestBody = .answerFromCache(request)
        case .forward(let target, let platform, let cacheResult):
            let annotation = withProxy { proxy in cacheResult.map { proxy.cacheReporting.forwarded($0) } }
            let length = Self.bodyLength(of: head)
            // A body is read whole before the backend sees the request, so that a slow client holds no backend
            // connection; unless its route streams uploads.
            if length != .none, !withProxy({ proxy in proxy.router.streamsBody(of: target) }) {
                // Refused at once when it says it is too large: the backend never sees it.
                if let declared = length.declared, declared > maxBodyBytes { return refuseNow(Self.bodyTooLarge) }
                let forward = BufferedForward(
                    head: head,
                    target: target,
                    platform: platform,
                    annotation: annotation,
                    buffer: bodyBuffer(context: context)
                )
                return startBuffering(forward)
            }
            let body = length == .none ? nil : bodyStream(for: length, context: context)
            requestBody = .forward(body)
            withProxy { proxy in
                PassThroughResponder().respond(
                    to: head,
                    target: target,
                    platform: platform,
                    annotation: annotation,
                    body: body.map { .streamed($0) } ?? .none,
                    proxy: proxy,
                    sink: self
                )
            }
        case .queuedWrite(let target, let platform, let route, let maxBodyBytes):
            let write = QueuedWriteResponder.Write(
                head: head,
                target: target,
                platform: platform,
                route: route,
                body: ByteBuffer()
            )
            requestBody = .collectWrite(write, limit: maxBodyBytes)
        case .refuse(let error, let closeConnection):
            proxy.logger.info("request refused", metadata: ["uri": "\(head.uri.prefix(200))", "error": "\(error)"])
            guard closeConnection else {
                requestBody = .refuse(error)
                return
            }
            // Answered at once, without reading the rest: what follows can no longer be trusted to be a request.
            refuseNow(error)
        case .queueStatus(let id):
            requestBody = .answerQueueStatus(id: id)
        }
    }

    /// How a request says its body is framed.
    private enum BodyLength: Equatable {
        /// It has none.
        case none
        /// It declares this many bytes.
        case declared(Int)
        /// In chunks, of a length known only at the end.
        case chunked

        var declared: Int? {
            if case .declared(let length) = self { return length }
            return nil
        }
    }

    private static func bodyLength(of head: HTTPRequestHead) -> BodyLength {
        if head.headers[canonicalForm: "transfer-encoding"].contains(where: { $0.lowercased() == "chunked" }) {
            return .chunked
        }
        guard let length = head.headers.first(name: "content-length").flatMap({ Int($0) }), length > 0 else {
            return .none
        }
        return .declared(length)
    }

    /// The buffer a forwarded request's body is read into, whole. Reading pauses while it cannot take more.
    private func bodyBuffer(context: ChannelHandlerContext) -> RequestBodyBuffer {
        let buffer = withProxy { proxy in
            RequestBodyBuffer(
                eventLoop: context.eventLoop,
                memoryLimit: proxy.configuration.limits.requestBufferBytes,
                directory: proxy.requestBufferDirectory,
                threadPool: proxy.threadPool
            )
        }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let id = ObjectIdentifier(buffer)
        buffer.setDemandHandler {
            let handler = loopBound.value
            // A buffer the connection has let go of may not resume reading for the request after it.
            guard case .buffer(let current) = handler.requestBody, ObjectIdentifier(current.buffer) == id else {
                return
            }
            if handler.machine.bodyTakerReady() { handler.context?.read() }
        }
        return buffer
    }

    /// Starts reading a forwarded request's body whole. A client that waits for `100 Continue` is told to go on by
    /// the proxy itself: the backend will see nothing before the body is in.
    private func startBuffering(_ forward: BufferedForward) {
        requestBody = .buffer(forward)
        let head = forward.head
        if head.version.major == 1, head.version.minor >= 1,
            head.headers[canonicalForm: "expect"].contains(where: { $0.lowercased() == "100-continue" })
        {
            writeInterim(status: .continue, headers: [:])
        }
    }

    /// A forwarded body past `limits.maxBodyBytes`.
    private static let bodyTooLarge = ProxyError(.tooLarge, "the request body exceeds limits.maxBodyBytes")

    /// Lets go of a body being read whole for a forward that will not be made: its memory, and its file if it has
    /// one.
    func discardBufferedBody() {
        guard case .buffer(let forward) = requestBody else { return }
        requestBody = .none
        forward.buffer.discard()
    }

    /// The body of a forwarded request read whole: it goes to the backend now, or the error that kept it from
    /// being buffered answers.
    private func forwardBuffered(_ forward: BufferedForward, body result: Result<RequestBodyBuffer.Body, any Error>) {
        let body: ForwardedRequestBody
        switch result {
        case .success(.whole(let buffer)):
            body = .whole(buffer)
        case .success(.spooled(let file, let length)):
            body = .spooled(file, length: length)
        case .failure(let error):
            let proxyError =
                error as? ProxyError ?? ProxyError(.unavailable, "the request body could not be buffered")
            proxy.logger.warning("request body not buffered", metadata: ["error": "\(proxyError)"])
            return write(proxyError)
        }
        withProxy { proxy in
            PassThroughResponder().respond(
                to: forward.head,
                target: forward.target,
                platform: forward.platform,
                annotation: forward.annotation,
                body: body,
                proxy: proxy,
                sink: self
            )
        }
    }

    /// The stream a forwarded request's body goes into. Reading pauses while the backend cannot take more.
    private func bodyStream(for length: BodyLength, context: ChannelHandlerContext) -> RequestBodyStream {
        let stream = RequestBodyStream(eventLoop: context.eventLoop, contentLength: length.declared)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let id = ObjectIdentifier(stream)
        stream.setDemandHandler {
            let handler = loopBound.value
            // A stream the connection has let go of may not resume reading for the request after it.
            guard case .forward(let current?) = handler.requestBody, ObjectIdentifier(current) == id else { return }
            if handler.machine.bodyTakerReady() { handler.context?.read() }
        }
        return stream
    }

    private func receiveBody(_ part: ByteBuffer) {
        switch requestBody {
        case .forward(let stream?):
            requestBodyBytes += part.readableBytes
            guard requestBodyBytes <= maxBodyBytes else {
                // The forward fails with this error and answers 413 (or cuts the response short); the rest of the
                // body is not read.
                requestBody = .none
                machine.closeAfterResponse()
                stream.fail(Self.bodyTooLarge)
                return
            }
            if !stream.append(part) { machine.bodyTakerFull() }
        case .buffer(let forward):
            requestBodyBytes += part.readableBytes
            guard requestBodyBytes <= maxBodyBytes else {
                // Refused without the backend ever seeing it; the rest of the body is not read.
                return refuseNow(Self.bodyTooLarge)
            }
            if !forward.buffer.append(part) { machine.bodyTakerFull() }
        case .collectWrite(var write, let limit):
            guard write.body.readableBytes + part.readableBytes <= limit else {
                requestBody = .none
                refuseNow(RequestRouter.queuedBodyTooLarge(limit: limit))
                return
            }
            requestBody = .none  // keeps the buffer uniquely referenced while it grows
            var part = part
            write.body.writeBuffer(&part)
            requestBody = .collectWrite(write, limit: limit)
        case .none, .answerFromCache, .refuse, .forward(nil), .answerQueueStatus:
            break
        }
    }

    private func endRequest(context: ChannelHandlerContext) {
        // Moved out, not copied: a copy would retain the request it holds.
        var body = RequestBody.none
        swap(&body, &requestBody)
        requestBodyBytes = 0
        switch consume body {
        case .answerFromCache(let request):
            withProxy { proxy in cacheResponder.respond(to: request, proxy: proxy, sink: self) }
        case .refuse(let error):
            write(error)
        case .forward(let stream):
            stream?.finish()
            // The body is whole: reading, if it was paused while the backend took the body, is not held for the
            // requests after this one (the stream's own demand no longer counts once it is let go).
            if machine.bodyTakerReady() { context.read() }
        case .buffer(let forward):
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            forward.buffer.finish { result in loopBound.value.forwardBuffered(forward, body: result) }
            // As for a streamed body: reading is not held for the requests after this one.
            if machine.bodyTakerReady() { context.read() }
        case .collectWrite(let write, _):
            withProxy { proxy in QueuedWriteResponder().respond(to: write, proxy: proxy, sink: self) }
        case .answerQueueStatus(let id):
            answerQueueStatus(id)
        case .none:
            break
        }
    }

    /// Answers a queued write's public status. Out of line: inlined into ``endRequest(context:)``, it made every
    /// request's end cost more.
    @inline(never)
    private func answerQueueStatus(_ id: String) {
        withProxy { proxy in QueueStatusResponder().respond(to: id, proxy: proxy, sink: self) }
    }

    /// Answers with `error` at once, and closes the connection after it without reading more.
    private func refuseNow(_ error: ProxyError) {
        discardBufferedBody()
        requestBody = .none
        machine.closeAfterResponse()
        write(error)
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
            if case .forward(let stream?) = requestBody {
                requestBody = .none
                stream.fail(error)
                return
            }
            discardBufferedBody()
            requestBody = .none
            // A response already under way can only be cut short.
            guard !writer.headWritten else { return abort() }
            // Without a head there is no request to answer for: what the writer knows is the one before's.
            if !headArrived { writer.answerWithoutRequest() }
            write(error)
        case .closeAfterResponse:
            // The response under way ends the connection; a body still streaming to the backend cannot be
            // completed, and the backend must not take what came as a whole request.
            if case .forward(let stream?) = requestBody {
                requestBody = .none
                stream.fail(error)
            }
            discardBufferedBody()
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
        if case .forward(let stream?) = requestBody {
            requestBody = .none
            stream.fail(ProxyError(.network, "the client closed the connection"))
        }
        // A body cut off while it was read whole: the backend never hears of the request.
        discardBufferedBody()
        context.fireChannelInactive()
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
        while let action = machine.nextHeldBackPart(now: NIODeadline.now()) {
            perform(action, context: context)
            guard self.context != nil else { return }
        }
        isHandlingRead = false
        flushIfNeeded(context: context)
        guard !machine.hasHeldBackParts else { return }
        let requestStarted = !parser.isBetweenRequests || unparsed != nil
        if machine.heldBackPartsHandled(requestStarted: requestStarted, now: NIODeadline.now()) { context.read() }
        updateWakeUp()
    }
}
