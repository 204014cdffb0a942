import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Answers the requests of one client connection on the public listener.
///
/// GET and HEAD take the cache path: a fresh entry is written straight from memory on this event loop; a
/// miss goes through the ``ComponentFetcher``. Every other method is forwarded to the backend with both bodies
/// streamed. Requests on one connection are answered in order: parts of later requests wait until the current
/// response has ended.
///
/// It reads the connection's bytes itself with ``HTTPRequestParser``, rather than behind a decoding handler: a
/// request then reaches it without passing through another handler, a type-erased wrapper and a buffer of its own,
/// which on a cache hit is a good part of the work.
final class PublicHTTPHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Where the current request is in its life.
    private enum State {
        /// Waiting for a request head.
        case idle
        /// A cache-path request whose head has arrived; it is answered when its end arrives.
        case readingCacheRequest(CacheRequest)
        /// A request that is answered with an error once its body has been read and dropped.
        case rejecting(ProxyError, keepAlive: Bool, isHead: Bool)
        /// A request being forwarded; its body parts go into the stream.
        case forwarding(RequestBodyStream?)
        /// A request on a queued write route, whose body is held whole so it can be stored if the backend
        /// cannot take it now.
        case bufferingWrite(QueuedWrite)
        /// A cache-path request that missed: its fetch is in flight, and `writer` answers it when the fetch ends.
        case answeringMiss(CacheRequest, writer: ResponseWriter)
        /// The request has been read; its response is being produced.
        case responding
    }

    /// The handler, for the fetcher's callback, which runs on the handler's loop. Not `NIOLoopBound`, which also
    /// holds the loop: a closure that captures more than one reference is given a context object of its own, an
    /// allocation on every miss, while one that captures a single reference uses it as its context.
    private struct FetchCallbackTarget: @unchecked Sendable {
        let handler: PublicHTTPHandler
    }

    /// Reading these through the shared context cost a reference count per access; a copy per connection
    /// costs none.
    private struct RequestSettings {
        var limits: ProxyConfiguration.Limits
        var beagleHash: Bool
        /// `prefetch.followActions`: how many hops of navigation a stored component's prefetches follow.
        var followActions: Int
        /// The policy of every path when no route has one of its own; nil when routes must be looked up.
        var onlyPolicy: ProxyConfiguration.RoutePolicy?
        /// `limits.idleTimeout` and `limits.requestTimeout`, converted once: every request arms both.
        var idleTimeout: TimeAmount
        var requestTimeout: TimeAmount

        init(_ configuration: ProxyConfiguration) {
            limits = configuration.limits
            beagleHash = configuration.compat.beagleHash
            followActions = configuration.prefetch.followActions
            onlyPolicy = configuration.cache.routes.isEmpty ? configuration.cache.policy : nil
            idleTimeout = configuration.limits.idleTimeout.timeAmount
            requestTimeout = configuration.limits.requestTimeout.timeAmount
        }
    }

    private struct QueuedWrite {
        var head: HTTPRequestHead
        var target: RequestTarget
        var platform: String
        var body: ByteBuffer
        var limit: Int
    }

    /// A class, so that moving it through the state machine and into callbacks costs one reference count,
    /// not one per field.
    private final class CacheRequest {
        let head: HTTPRequestHead
        let key: CacheKey
        let target: RequestTarget
        let platform: String
        let policy: ProxyConfiguration.RoutePolicy

        init(
            head: HTTPRequestHead,
            key: CacheKey,
            target: RequestTarget,
            platform: String,
            policy: ProxyConfiguration.RoutePolicy
        ) {
            self.head = head
            self.key = key
            self.target = target
            self.platform = platform
            self.policy = policy
        }
    }

    private let runtime: ProxyRuntime
    /// The context in force when the current request started; refreshed when a reload replaced it.
    private var proxy: ProxyContext {
        didSet {
            settings = RequestSettings(proxy.configuration)
            unretainedProxy = Unmanaged.passUnretained(proxy)
        }
    }
    /// ``proxy`` without a reference count, for ``withProxy(_:)``.
    private var unretainedProxy: Unmanaged<ProxyContext>
    /// What every request reads of the configuration, copied out when the context changes.
    private var settings: RequestSettings
    private var generation: Int
    private var state = State.idle {
        didSet {
            guard case .idle = state else { return }
            if !isIdleTimerArmed { armTimer(.idle) }
            if !pipelined.isEmpty, !handlingPipelined { schedulePipelinedRequests() }
        }
    }
    /// Parts of requests that arrived while an earlier one was being answered (HTTP/1.1 pipelining); they are
    /// handled in order once the response before them has been written, and reading pauses meanwhile.
    private var pipelined: CircularBuffer<HTTPServerRequestPart> = []
    /// Whether the current request's end has been read, so further parts belong to the next requests.
    private var currentRequestRead = false
    private var handlingPipelined = false
    private let connectionState: ConnectionResponseState
    /// Reads are held while a forwarded body waits for the backend to take it.
    private var readsPaused = false
    private var readRequestedWhilePaused = false
    private var parser: HTTPRequestParser
    /// The bytes after the last complete part of a read that ended inside one; the next read is appended.
    private var unparsed: ByteBuffer?
    /// Set once the bytes were not HTTP this proxy accepts, or a request came behind a response that closes the
    /// connection: the connection is being answered and closed, and nothing it sends after that is read.
    private var stoppedParsing = false
    /// Bytes of the current request's body so far, against `limits.maxBodyBytes`.
    private var bodyBytes = 0
    /// Counts and logs the current request when its response is written.
    private var accounting: RequestAccounting?
    /// The peer's IP address as text, and whether it is a trusted proxy, worked out on the connection's first
    /// request that goes upstream: formatting it allocates, and a connection's peer does not change.
    private var peer: Peer?

    private struct Peer {
        var address: String?
        /// Listed in `listen.trustedProxies`: its forwarding headers are kept, and this hop appended to them.
        var isTrustedProxy: Bool
    }

    /// The one deadline a connection has: for its next request (idle), or for the rest of the current one
    /// (request). A slow client cannot hold a connection past either.
    ///
    /// Arming only moves the deadline; a single scheduled task per connection wakes up at the earliest
    /// deadline it knows and re-schedules itself if the deadline has moved on. So a request costs a clock
    /// read, not a timer allocation and cancellation.
    private enum TimerKind { case idle, request }
    private var deadline: (kind: TimerKind, at: NIODeadline)?
    private var wakeUp: (at: NIODeadline, scheduled: Scheduled<Void>)?
    private var isIdleTimerArmed: Bool { deadline?.kind == .idle }
    private var context: ChannelHandlerContext?

    /// Made on the connection's event loop: `buffers` and `requests` are that loop's.
    init(runtime: ProxyRuntime, buffers: ResponseBufferRecycler, requests: RequestTally) {
        self.runtime = runtime
        // The generation first, then the context, read once: a reload in between leaves an older generation,
        // which the first request sees and refreshes, and `proxy` and `unretainedProxy` are the same context.
        self.generation = runtime.generation
        let proxyContext = runtime.context
        self.proxy = proxyContext
        self.unretainedProxy = Unmanaged.passUnretained(proxyContext)
        self.settings = RequestSettings(proxyContext.configuration)
        self.connectionState = ConnectionResponseState(requests: requests, buffers: buffers)
        // A head may be as long as the URL and header limits together (plus slack for the request line and
        // whitespace), so ``RequestAdmission`` sees every head it could accept and answers the others with its
        // own 414 or 431.
        let limits = proxyContext.configuration.limits
        self.parser = HTTPRequestParser(maximumHeadBytes: limits.maxURLBytes + limits.maxHeaderBytes + 1024)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        armTimer(.idle)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        wakeUp?.scheduled.cancel()
        wakeUp = nil
        deadline = nil
        self.context = nil
    }

    private func armTimer(_ kind: TimerKind) {
        let at = NIODeadline.now() + (kind == .idle ? settings.idleTimeout : settings.requestTimeout)
        deadline = (kind, at)
        if let wakeUp, wakeUp.at <= at { return }
        scheduleWakeUp(at: at)
    }

    private func disarmTimer() {
        deadline = nil
    }

    private func scheduleWakeUp(at: NIODeadline) {
        guard let context else { return }
        wakeUp?.scheduled.cancel()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let scheduled = context.eventLoop.scheduleTask(deadline: at) { loopBound.value.wokeUp() }
        wakeUp = (at, scheduled)
    }

    private func wokeUp() {
        wakeUp = nil
        guard let deadline else { return }
        if deadline.at > .now() {
            scheduleWakeUp(at: deadline.at)
        } else {
            self.deadline = nil
            timerFired(deadline.kind)
        }
    }

    private func timerFired(_ kind: TimerKind) {
        guard let context else { return }
        switch (kind, state) {
        case (.idle, .idle):
            // After its last answer, a connection is the lingering close's to end: closing it here could reset a
            // client still sending. (Until that answer is written, this timer is what ends it.)
            if connectionState.answeredLast,
                (try? context.pipeline.syncOperations.handler(type: LingeringClose.self)) != nil
            {
                return
            }
            proxy.logger.debug("closing an idle connection")
            context.close(promise: nil)
        case (.request, .idle) where !parser.isBetweenRequests || unparsed != nil,
            (.request, .readingCacheRequest), (.request, .rejecting), (.request, .bufferingWrite):
            proxy.logger.info(
                "request timed out while being read",
                metadata: ["client": "\(context.remoteAddress?.description ?? "?")"]
            )
            // Without a head there is no request to account for yet (`accounting` is the one before's).
            let headArrived = !isIdle
            state = .responding
            closingResponseWriter(context: context, accounting: headArrived ? accounting : nil)
                .write(ProxyError(.requestTimeout, "the request was not complete within limits.requestTimeout"))
        case (.request, .forwarding(let stream)):
            stream?.fail(ProxyError(.requestTimeout, "the client's body did not arrive in time"))
            context.close(promise: nil)
        default:
            break
        }
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !stoppedParsing else { return }
        var bytes = unwrapInboundIn(data)
        // The request deadline runs from a request's first byte, not from its parsed head: a head sent slowly,
        // or stopped half-way, gets its 408 then. Bytes that wait behind a response are timed when handled.
        if isIdle, pipelined.isEmpty, parser.isBetweenRequests, unparsed == nil, bytes.readableBytes > 0 {
            armTimer(.request)
        }
        if var earlier = unparsed {
            unparsed = nil  // so that `earlier` is the only reference and grows in place
            earlier.writeBuffer(&bytes)
            bytes = earlier
        }
        do {
            while let part = try parser.next(from: &bytes) {
                receive(part, context: context)
                // A handler removed while answering a part (the channel closed under it) reads no more, and
                // nothing is read past a response that ends the connection.
                guard self.context != nil, !stoppedParsing else { return }
            }
        } catch {
            // The rest of this read is dropped, and later reads are ignored until the answer has closed the
            // connection: the parser's place in the byte stream is lost, and a later read could otherwise be
            // taken for the start of a new request.
            stoppedParsing = true
            refuseMalformed(error, context: context)
            return
        }
        if bytes.readableBytes > 0 {
            bytes.discardReadBytes()
            unparsed = bytes
        }
    }

    private func receive(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        if currentRequestRead, !isIdle || !pipelined.isEmpty {
            pipelined.append(part)
            readsPaused = true
            return
        }
        handle(part, context: context)
    }

    private var isIdle: Bool {
        if case .idle = state { return true }
        return false
    }

    private func schedulePipelinedRequests() {
        guard let context else { return }
        // After the current call stack: the response that made the connection idle is written first.
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute { loopBound.value.handlePipelinedRequests() }
    }

    private func handlePipelinedRequests() {
        guard let context else { return }
        handlingPipelined = true
        // A request's parts are handled up to its end; the next request waits until the connection is idle.
        while !pipelined.isEmpty, !stoppedParsing, isIdle || !currentRequestRead {
            handle(pipelined.removeFirst(), context: context)
        }
        handlingPipelined = false
        if pipelined.isEmpty {
            flushIfNeeded(context: context)
            resumeReading(context: context)
        }
    }

    /// Calls `body` with ``proxy``, not retained: for the calls every request makes on it. Every loop shares the
    /// context, and each call through ``proxy`` retained it (or the cache it holds), writing the count from both
    /// processors in turn, three times a hit. Sound because ``proxy`` holds the context, and only this handler
    /// replaces it, on its loop, between requests.
    @inline(__always)
    private func withProxy<Result>(_ body: (ProxyContext) -> Result) -> Result {
        unretainedProxy._withUnsafeGuaranteedRef(body)
    }

    private func handle(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head):
            guard !connectionState.answeredLast else {
                // Pipelined behind a response that closes the connection: neither this request nor anything
                // after it is handled.
                stoppedParsing = true
                pipelined.removeAll()
                unparsed = nil
                return
            }
            currentRequestRead = false
            if runtime.generation != generation {
                generation = runtime.generation
                proxy = runtime.context
                // listen.trustedProxies may have changed: the peer is judged again.
                peer = nil
            }
            // Armed at the first byte already, unless the request waited behind another (pipelined).
            if deadline?.kind != .request { armTimer(.request) }
            bodyBytes = 0
            accounting = RequestAccounting(proxy: proxy, head: head, clientAddress: peer(context).address)
            receiveHead(head, context: context)
        case .body(var part):
            bodyBytes += part.readableBytes
            switch state {
            case .forwarding(let stream?):
                guard bodyBytes <= settings.limits.maxBodyBytes else {
                    // The forward fails with this error and answers 413 (or cuts the response short).
                    stream.fail(ProxyError(.tooLarge, "the request body exceeds limits.maxBodyBytes"))
                    state = .responding
                    return
                }
                if !stream.append(part) { readsPaused = true }
            case .bufferingWrite(var write):
                guard write.body.readableBytes + part.readableBytes <= write.limit else {
                    refuseNow(Self.queuedBodyTooLarge(proxy.writeQueue), context: context)
                    return
                }
                state = .responding  // keeps the buffer uniquely referenced while it grows
                write.body.writeBuffer(&part)
                state = .bufferingWrite(write)
            default:
                break
            }
        case .end:
            currentRequestRead = true
            disarmTimer()
            receiveEnd(context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
        context.fireChannelReadComplete()
    }

    private func flushIfNeeded(context: ChannelHandlerContext) {
        if connectionState.needsFlush {
            connectionState.needsFlush = false
            context.flush()
        }
    }

    private func receiveHead(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        guard case .idle = state else {
            // Parts of a later request wait in `pipelined` until the connection is idle; anything else is a bug.
            state = .rejecting(ProxyError(.badRequest, "unexpected request head"), keepAlive: false, isHead: false)
            return
        }
        let isHead = head.method == .HEAD
        let target: RequestTarget
        do {
            target = try RequestAdmission.admit(head, limits: settings.limits)
        } catch {
            proxy.logger.info(
                "request refused",
                metadata: ["uri": "\(head.uri.prefix(200))", "error": "\(error.error)"]
            )
            if error.closeConnection {
                refuseNow(error.error, context: context)
            } else {
                state = .rejecting(error.error, keepAlive: head.keepsConnectionOpen, isHead: isHead)
            }
            return
        }
        let platform: String
        let found = withProxy { proxy in
            Result<String, ProxyError> { () throws(ProxyError) in try proxy.platform(of: head.headers) }
        }
        switch found {
        case .success(let found):
            platform = found
        case .failure(let error):
            state = .rejecting(error, keepAlive: head.keepsConnectionOpen, isHead: isHead)
            return
        }

        guard head.method == .GET || head.method == .HEAD else {
            if let queue = proxy.writeQueue, queue.route(for: head.method, path: target.path) != nil {
                let declared = head.headers.first(name: "content-length").flatMap(Int.init) ?? 0
                guard declared <= queue.maxBodyBytes else {
                    refuseNow(Self.queuedBodyTooLarge(queue), context: context)
                    return
                }
                state = .bufferingWrite(
                    QueuedWrite(
                        head: head,
                        target: target,
                        platform: platform,
                        body: ByteBuffer(),
                        limit: queue.maxBodyBytes
                    )
                )
                return
            }
            startForwarding(head, target: target, platform: platform, cacheStatus: nil, context: context)
            return
        }
        let policy = settings.onlyPolicy ?? proxy.configuration.cache.policy(forPath: target.path)
        if policy.bypass {
            startForwarding(head, target: target, platform: platform, cacheStatus: .bypass, context: context)
            return
        }
        let key = withProxy { proxy in
            proxy.cacheKey(target: target, platform: platform, headers: head.headers, policy: policy)
        }
        state = .readingCacheRequest(
            CacheRequest(head: head, key: key, target: target, platform: platform, policy: policy)
        )
    }

    /// Answers with `error` at once, without reading the rest of the request, and closes the connection:
    /// what follows on it can no longer be trusted to be a request.
    private func refuseNow(_ error: ProxyError, context: ChannelHandlerContext) {
        state = .responding
        disarmTimer()
        closingResponseWriter(context: context, accounting: accounting).write(error)
    }

    /// A writer for a response after which the connection closes.
    private func closingResponseWriter(
        context: ChannelHandlerContext,
        accounting: RequestAccounting?
    ) -> ResponseWriter {
        ResponseWriter(
            context: context,
            keepAlive: false,
            isHead: false,
            connectionState: connectionState,
            accounting: accounting
        )
    }

    private func receiveEnd(context: ChannelHandlerContext) {
        switch state {
        case .readingCacheRequest(let request):
            state = .responding
            answerFromCache(request, context: context)
        case .rejecting(let error, let keepAlive, let isHead):
            // The next pipelined request may arrive as soon as this response's end is written.
            state = .idle
            ResponseWriter(
                context: context,
                keepAlive: keepAlive,
                isHead: isHead,
                connectionState: connectionState,
                accounting: accounting
            )
            .write(error)
        case .forwarding(let stream):
            stream?.finish()
            state = .responding
        case .bufferingWrite(let write):
            state = .responding
            submitQueuedWrite(write, context: context)
        case .idle, .answeringMiss, .responding:
            break
        }
    }

    // MARK: The cache path

    private func answerFromCache(_ request: CacheRequest, context: ChannelHandlerContext) {
        let hasAuthorization = request.head.headers.contains(name: "authorization")
        var staleEntry: CachedResponse?
        if !hasAuthorization {
            let now = NIODeadline.now()
            let lookup = withProxy { proxy in
                proxy.cache.lookup(request.key, requestHeaders: request.head.headers, now: now)
            }
            switch lookup {
            case .fresh(let entry):
                state = .idle
                responseWriter(for: request, context: context, flushesWithReadBurst: true)
                    .write(entry, presentation(of: entry, .hit, request: request, now: now))
                return
            case .stale(let entry) where entry.mayServeWhileRevalidating(at: now):
                proxy.cache.recordStaleServe(request.key)
                proxy.fetcher.refreshInBackground(
                    fetchRequest(for: request, staleEntry: entry, context: context),
                    on: context.eventLoop
                )
                state = .idle
                responseWriter(for: request, context: context)
                    .write(entry, presentation(of: entry, .stale, request: request, now: now))
                return
            case .stale(let entry):
                staleEntry = entry
            case .miss:
                break
            }
        }

        state = .answeringMiss(request, writer: responseWriter(for: request, context: context))
        let fetch = fetchRequest(for: request, staleEntry: staleEntry, context: context)
        let target = FetchCallbackTarget(handler: self)
        let eventLoop = context.eventLoop
        withProxy { proxy in
            proxy.fetcher.fetch(fetch, on: eventLoop) { result in target.handler.fetchEnded(result) }
        }
    }

    /// Answers the miss in flight with what its fetch produced.
    private func fetchEnded(_ result: Result<ComponentFetcher.Outcome, any Error>) {
        assert(context?.eventLoop.inEventLoop ?? true, "a fetch ended off the connection's loop")
        guard case .answeringMiss = state else {
            // Only a fetch this handler started ends here, and nothing else leaves `answeringMiss`.
            assertionFailure("a fetch ended with no miss in flight")
            return
        }
        // The request and its writer are moved out of the state, which becomes idle: bound in place, they were
        // copies, each of their references retained here and released again when the state was replaced.
        var ended = State.idle
        swap(&ended, &state)
        guard case .answeringMiss(let request, let writer) = consume ended else { return }
        answer(request, with: result, writer: writer)
    }

    /// Answers a cache-path request with what its fetch produced.
    private func answer(
        _ request: CacheRequest,
        with result: Result<ComponentFetcher.Outcome, any Error>,
        writer: ResponseWriter
    ) {
        let now = NIODeadline.now()
        // Stored and revalidated entries are logged by the fetcher, with their size and lifetime. The logger is
        // not copied for them: it is shared by every loop, and a copy writes its reference count.
        switch result {
        case .success(.stored(let entry)):
            writer.write(entry, presentation(of: entry, .miss, request: request, now: now))
        case .success(.revalidated(let entry)):
            writer.write(entry, presentation(of: entry, .revalidated, request: request, now: now))
        case .success(.servedStale(let entry, let reason)):
            // The fetcher logged the failure it stood in for, once per key and interval.
            proxy.logger.debug("serving stale", metadata: ["key": "\(request.key)", "reason": "\(reason)"])
            proxy.cache.recordStaleServe(request.key)
            writer.write(entry, presentation(of: entry, .stale, request: request, now: now))
        case .success(.notStored(let response, let reason)):
            proxy.logger.debug("miss, not stored", metadata: ["key": "\(request.key)", "reason": "\(reason)"])
            writer.write(response, cacheStatus: .bypass)
        case .failure(let error):
            let proxyError =
                error as? ProxyError
                ?? ProxyError(.internalError, "the fetch failed inside the proxy", detail: "\(error)")
            // An invalid component was logged by the fetcher that found it.
            if proxyError.kind != .decoding {
                proxy.fetcher.failureLog.log(
                    level: .info,
                    "miss, upstream failed",
                    key: request.key.target,
                    kind: proxyError.kind.description,
                    metadata: ["key": "\(request.key)", "error": "\(proxyError)"]
                )
            }
            writer.write(proxyError, cacheStatus: .miss)
        }
    }

    private func responseWriter(
        for request: CacheRequest,
        context: ChannelHandlerContext,
        flushesWithReadBurst: Bool = false
    ) -> ResponseWriter {
        ResponseWriter(
            context: context,
            keepAlive: request.head.keepsConnectionOpen,
            isHead: request.head.method == .HEAD,
            connectionState: connectionState,
            accounting: accounting,
            flushesWithReadBurst: flushesWithReadBurst
        )
    }

    private func peer(_ context: ChannelHandlerContext) -> Peer {
        if let peer { return peer }
        let remote = context.channel.remoteAddress
        let trusted = proxy.configuration.trustedProxies
        let isTrustedProxy =
            !trusted.isEmpty
            && remote.flatMap(IPAddressRange.bytes(of:)).map { bytes in trusted.contains { $0.contains(bytes) } }
                == true
        let peer = Peer(address: remote?.ipAddress, isTrustedProxy: isTrustedProxy)
        self.peer = peer
        return peer
    }

    /// The upstream headers of a request forwarded from this connection (pass-through and queued writes).
    private func passThroughHeaders(
        _ headers: HTTPHeaders,
        platform: String,
        context: ChannelHandlerContext
    ) -> HTTPHeaders {
        let peer = peer(context)
        return proxy.requestBuilder.headers(
            from: headers,
            platform: platform,
            clientAddress: peer.address,
            purpose: .passThrough,
            clientIsTrustedProxy: peer.isTrustedProxy
        )
    }

    private func fetchRequest(
        for request: CacheRequest,
        staleEntry: CachedResponse?,
        context: ChannelHandlerContext
    ) -> ComponentFetcher.Request {
        let peer = peer(context)
        return proxy.cacheFill(
            key: request.key,
            target: request.target,
            platform: request.platform,
            clientHeaders: request.head.headers,
            policy: request.policy,
            staleEntry: staleEntry,
            clientAddress: peer.address,
            clientIsTrustedProxy: peer.isTrustedProxy,
            followActions: settings.followActions
        )
    }

    /// How an entry answers this request: in full, or as a 304 when the client's validator matches.
    private func presentation(
        of entry: CachedResponse,
        _ cacheStatus: CacheResult,
        request: CacheRequest,
        now: NIODeadline
    ) -> ResponseWriter.EntryPresentation {
        var presentation = ResponseWriter.EntryPresentation(cacheResult: cacheStatus, age: entry.ageSeconds(at: now))
        let headers = request.head.headers
        if settings.beagleHash {
            presentation.beagleMaxAge = entry.remainingLifetime(at: now)
            // Beagle 1.x clients only ever get a 304 for the hash they sent.
            presentation.notModified = headers.first(name: "beagle-hash").map(entry.hasContentHash) ?? false
        } else if entry.status == .ok,
            headers.contains(name: "if-none-match") || headers.contains(name: "if-modified-since")
        {
            presentation.notModified = ConditionalRequest.isNotModified(
                requestHeaders: headers,
                etag: entry.etag,
                lastModified: entry.lastModified
            )
        }
        return presentation
    }

    // MARK: Pass-through

    private func startForwarding(
        _ head: HTTPRequestHead,
        target: RequestTarget,
        platform: String,
        cacheStatus: CacheResult?,
        context: ChannelHandlerContext
    ) {
        let contentLength = head.headers.first(name: "content-length").flatMap { Int($0) }
        let isChunked = head.headers[canonicalForm: "transfer-encoding"].contains { $0.lowercased() == "chunked" }
        var stream: RequestBodyStream?
        if isChunked || (contentLength ?? 0) > 0 {
            let bodyStream = RequestBodyStream(
                eventLoop: context.eventLoop,
                contentLength: isChunked ? nil : contentLength
            )
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            bodyStream.setDemandHandler {
                let (handler, context) = loopBound.value
                handler.resumeReading(context: context)
            }
            stream = bodyStream
        }
        state = .forwarding(stream)

        let upstream = UpstreamRequest(
            method: head.method,
            target: target.description,
            headers: passThroughHeaders(head.headers, platform: platform, context: context)
        )
        let accounting = self.accounting
        let sink = streamingSink(for: head, target: target, cacheStatus: cacheStatus, context: context)
        let failureLog = proxy.fetcher.failureLog
        proxy.client.forward(upstream, body: stream, on: context.eventLoop, to: sink).hop(to: context.eventLoop)
            .assumeIsolated().whenComplete { result in
                switch result {
                case .success:
                    break
                case .failure(let error):
                    let proxyError =
                        error as? ProxyError ?? ProxyError(.network, "the backend exchange failed", detail: "\(error)")
                    failureLog.log(
                        level: .info,
                        "forwarding failed",
                        key: "\(head.method) \(target)",
                        kind: proxyError.kind.description,
                        metadata: ["method": "\(head.method)", "target": "\(target)", "error": "\(proxyError)"]
                    )
                    stream?.fail(proxyError)
                    if sink.headWasSent {
                        // Part of the backend's response is out; the only honest signal left is to cut it short.
                        context.close(promise: nil)
                    } else {
                        self.state = .idle
                        ResponseWriter(
                            context: context,
                            keepAlive: false,
                            isHead: head.method == .HEAD,
                            connectionState: self.connectionState,
                            accounting: accounting
                        )
                        .write(proxyError, cacheStatus: cacheStatus)
                    }
                }
            }
    }

    /// Streams a backend's answer to `head` to this connection: the cache entries an unsafe method's answer
    /// invalidates go when its head comes, and the connection takes its next request when its end is written.
    private func streamingSink(
        for head: HTTPRequestHead,
        target: RequestTarget,
        cacheStatus: CacheResult?,
        context: ChannelHandlerContext
    ) -> ChannelResponseSink {
        let loopBoundHandler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let cache = proxy.cache
        let requestHost = head.headers.first(name: "host")
        return ChannelResponseSink(
            context: context,
            keepAlive: head.keepsConnectionOpen,
            isHead: head.method == .HEAD,
            cacheStatus: cacheStatus,
            accounting: accounting,
            connectionState: connectionState,
            receivedHead: { status, headers in
                Invalidation.apply(
                    method: head.method,
                    target: target,
                    status: status,
                    responseHeaders: headers,
                    requestHost: requestHost,
                    cache: cache
                )
            },
            beforeEnd: { loopBoundHandler.value.state = .idle }
        )
    }

    // MARK: Queued writes

    private static func queuedBodyTooLarge(_ queue: WriteQueue?) -> ProxyError {
        ProxyError(.tooLarge, "the request body exceeds queue.maxBodyBytes (\(queue?.maxBodyBytes ?? 0) bytes)")
    }

    /// Forwards a write at once; when the backend cannot take it (unreachable, timed out, or a retryable
    /// status) the request is stored durably and the client gets 202 with where to follow it. On a sequential
    /// route with requests waiting in the queue it is queued behind them instead (``WriteQueue/admitWrite``).
    private func submitQueuedWrite(_ write: QueuedWrite, context: ChannelHandlerContext) {
        guard let queue = proxy.writeQueue, let route = queue.route(for: write.head.method, path: write.target.path)
        else { return }
        let id = WriteQueue.newID()
        var headers = passThroughHeaders(write.head.headers, platform: write.platform, context: context)
        headers.remove(name: "transfer-encoding")
        QueueEntry.setIdempotencyKey(in: &headers, queueID: id)
        let upstream = UpstreamRequest(
            method: write.head.method,
            target: write.target.description,
            headers: headers,
            body: write.body
        )
        let writer = ResponseWriter(
            context: context,
            keepAlive: write.head.keepsConnectionOpen,
            isHead: false,
            connectionState: connectionState,
            accounting: accounting
        )
        let eventLoop = context.eventLoop
        let logger = proxy.logger
        let client = proxy.client
        // The backend's answer streams to the client as pass-through answers do, whatever its size; only an
        // answer whose status queues the write is held back.
        let answer = QueuedWriteAnswerSink(
            passingTo: streamingSink(for: write.head, target: write.target, cacheStatus: nil, context: context),
            retryableStatuses: Set(queue.configuration.retryableStatuses),
            eventLoop: eventLoop
        )

        // Succeeds with the 202 when the write was queued, with nil when the backend's answer went to the client.
        queue.admitWrite(on: route, eventLoop: eventLoop) { queueBehindBacklog -> EventLoopFuture<UpstreamResponse?> in
            if queueBehindBacklog {
                return Self.enqueue(upstream, id: id, failure: nil, queue: queue, on: eventLoop).map { $0 }
            }
            let body = upstream.body.map { RequestBodyStream.complete($0, on: eventLoop) }
            return client.forward(upstream, body: body, on: eventLoop, to: answer)
                .flatMap { () -> EventLoopFuture<UpstreamResponse?> in
                    guard let status = answer.statusToQueueFor else { return eventLoop.makeSucceededFuture(nil) }
                    let failure = "backend answered \(status.code)"
                    return Self.enqueue(upstream, id: id, failure: failure, queue: queue, on: eventLoop).map { $0 }
                }
                .flatMapError { error -> EventLoopFuture<UpstreamResponse?> in
                    let failure: String
                    if let status = answer.statusToQueueFor {
                        failure = "backend answered \(status.code)"
                    } else if !answer.headWasSent, let proxyError = error as? ProxyError,
                        proxyError.kind == .network || proxyError.kind == .timeout
                    {
                        failure = proxyError.message
                    } else {
                        return eventLoop.makeFailedFuture(error)
                    }
                    return Self.enqueue(upstream, id: id, failure: failure, queue: queue, on: eventLoop).map { $0 }
                }
        }
        .hop(to: eventLoop).assumeIsolated().whenComplete { result in
            switch result {
            case .success(.none):
                // The backend's answer went to the client; the sink ended it and made the connection idle.
                break
            case .success(.some(let queued)):
                self.state = .idle
                writer.write(queued, cacheStatus: nil)
            case .failure(let error):
                let proxyError =
                    error as? ProxyError ?? ProxyError(.internalError, "the queued write failed", detail: "\(error)")
                logger.error(
                    "queued write failed",
                    metadata: ["target": "\(write.target)", "error": "\(proxyError)"]
                )
                if answer.headWasSent {
                    // Part of the backend's answer is out; the only honest signal left is to cut it short.
                    context.close(promise: nil)
                } else {
                    self.state = .idle
                    writer.write(proxyError)
                }
            }
        }
    }

    /// Stores the request durably; the 202 is only built once the store has it. `failure` is why the backend
    /// did not take it, nil when it was queued behind the route's backlog without being sent.
    private static func enqueue(
        _ request: UpstreamRequest,
        id: String,
        failure: String?,
        queue: WriteQueue,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<UpstreamResponse> {
        eventLoop.makeFutureWithTask {
            let receipt = try await queue.enqueue(QueuedRequest(request, failure: failure, id: id))
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "Location", value: receipt.location)
            headers.add(name: "Cache-Control", value: "no-store")
            return UpstreamResponse(status: receipt.status, headers: headers, body: ByteBuffer(string: receipt.json))
        }
    }

    private func resumeReading(context: ChannelHandlerContext) {
        guard readsPaused else { return }
        readsPaused = false
        if readRequestedWhilePaused {
            readRequestedWhilePaused = false
            context.read()
        }
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        if readsPaused {
            readRequestedWhilePaused = true
        } else {
            context.read()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !stoppedParsing, !parser.isBetweenRequests || unparsed != nil {
            proxy.logger.debug("the client closed the connection inside a request")
        }
        if case .forwarding(let stream?) = state {
            stream.fail(ProxyError(.network, "the client closed the connection"))
        }
        context.fireChannelInactive()
    }

    /// Malformed or oversized HTTP: nothing after it can be trusted. While the request is still being read (no
    /// response has begun), answer it; then close.
    private func refuseMalformed(_ failure: HTTPRequestParser.Failure, context: ChannelHandlerContext) {
        proxy.logger.info("malformed request", metadata: ["error": "\(failure)"])
        let refusal = failure.proxyError
        switch state {
        case .forwarding(let stream):
            stream?.fail(refusal)
            fallthrough
        case .idle, .readingCacheRequest, .rejecting, .bufferingWrite:
            state = .responding
            closingResponseWriter(context: context, accounting: nil).write(refusal)
        case .answeringMiss, .responding:
            context.close(promise: nil)
        }
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
        connectionState.closing = true
        if isIdle, pipelined.isEmpty { context.closeAfterAnswer(lingering: .whileDraining) }
    }
}

/// A queued write's answer: passed to the client as it streams in, unless its status is one that queues the
/// write (`queue.retryableStatuses`); such an answer is read past, and the write is queued.
private final class QueuedWriteAnswerSink: ForwardedResponseSink {
    private let client: ChannelResponseSink
    private let retryableStatuses: Set<Int>
    private let eventLoop: any EventLoop
    private let heldBackStatus: NIOLoopBoundBox<HTTPResponseStatus?>

    init(passingTo client: ChannelResponseSink, retryableStatuses: Set<Int>, eventLoop: any EventLoop) {
        self.client = client
        self.retryableStatuses = retryableStatuses
        self.eventLoop = eventLoop
        self.heldBackStatus = NIOLoopBoundBox(nil, eventLoop: eventLoop)
    }

    /// The status the backend answered that queues the write, if it did.
    var statusToQueueFor: HTTPResponseStatus? { heldBackStatus.value }

    /// Whether the client has been sent the head of the backend's answer.
    var headWasSent: Bool { client.headWasSent }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        guard !retryableStatuses.contains(Int(status.code)) else {
            heldBackStatus.value = status
            return
        }
        client.receiveHead(status: status, headers: headers)
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        heldBackStatus.value == nil ? client.receiveBodyPart(buffer) : eventLoop.makeSucceededVoidFuture()
    }

    func receiveEnd() {
        if heldBackStatus.value == nil { client.receiveEnd() }
    }
}

/// Writes a forwarded response to the client connection as it streams in from the backend.
private final class ChannelResponseSink: ForwardedResponseSink {
    private let context: NIOLoopBound<ChannelHandlerContext>
    private let keepAlive: Bool
    private let isHead: Bool
    private let cacheStatus: CacheResult?
    private let headSent: NIOLoopBoundBox<Bool>
    /// How the body is delimited, decided when the head is written.
    private let framing: NIOLoopBoundBox<ResponseEncoding.Framing>
    private let accounting: NIOLoopBound<RequestAccounting?>
    /// The status sent and the body bytes written so far, for accounting when the response ends.
    private let progress: NIOLoopBoundBox<(status: HTTPResponseStatus, bytes: Int)>
    private let receivedHead: @Sendable (HTTPResponseStatus, HTTPHeaders) -> Void
    private let beforeEnd: NIOLoopBound<() -> Void>
    private let connectionState: NIOLoopBound<ConnectionResponseState>

    /// - Parameter beforeEnd: called just before the end is written, when the connection may take the next
    ///   pipelined request.
    init(
        context: ChannelHandlerContext,
        keepAlive: Bool,
        isHead: Bool,
        cacheStatus: CacheResult?,
        accounting: RequestAccounting?,
        connectionState: ConnectionResponseState,
        receivedHead: @escaping @Sendable (HTTPResponseStatus, HTTPHeaders) -> Void,
        beforeEnd: @escaping () -> Void
    ) {
        self.connectionState = NIOLoopBound(connectionState, eventLoop: context.eventLoop)
        self.receivedHead = receivedHead
        self.accounting = NIOLoopBound(accounting, eventLoop: context.eventLoop)
        self.progress = NIOLoopBoundBox((.ok, 0), eventLoop: context.eventLoop)
        self.context = NIOLoopBound(context, eventLoop: context.eventLoop)
        self.keepAlive = keepAlive
        self.isHead = isHead
        self.cacheStatus = cacheStatus
        self.headSent = NIOLoopBoundBox(false, eventLoop: context.eventLoop)
        self.framing = NIOLoopBoundBox(.none, eventLoop: context.eventLoop)
        self.beforeEnd = NIOLoopBound(beforeEnd, eventLoop: context.eventLoop)
    }

    var headWasSent: Bool { headSent.value }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        receivedHead(status, headers)
        progress.value.status = status
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(headers)
        if let cacheStatus { headers.add(name: "X-Cache", value: cacheStatus.rawValue) }
        if !keepAlive || connectionState.value.closing { headers.replaceOrAdd(name: "Connection", value: "close") }
        headSent.value = true
        let head = HTTPResponseHead(version: .http1_1, status: status, headers: headers)
        let framing: ResponseEncoding.Framing
        if isHead || status.code < 200 || status == .noContent || status == .notModified {
            framing = .none
        } else if headers.contains(name: "content-length") {
            framing = .contentLength
        } else {
            framing = .chunked
        }
        self.framing.value = framing
        var buffer = context.value.channel.allocator.buffer(capacity: 512)
        ResponseEncoding.writeHead(head, framing: framing, into: &buffer)
        context.value.write(NIOAny(buffer), promise: nil)
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let context = self.context.value
        guard !isHead, framing.value != .none else { return context.eventLoop.makeSucceededVoidFuture() }
        progress.value.bytes += buffer.readableBytes
        guard framing.value == .chunked else { return context.writeAndFlush(NIOAny(buffer)) }
        guard buffer.readableBytes > 0 else { return context.eventLoop.makeSucceededVoidFuture() }
        context.write(
            NIOAny(ResponseEncoding.chunkPrefix(count: buffer.readableBytes, allocator: context.channel.allocator)),
            promise: nil
        )
        context.write(NIOAny(buffer), promise: nil)
        return context.writeAndFlush(NIOAny(ResponseEncoding.chunkSuffix))
    }

    func receiveEnd() {
        accounting.value?.record(
            status: progress.value.status,
            cacheResult: cacheStatus,
            bytes: progress.value.bytes,
            in: connectionState.value.requests
        )
        let connectionState = self.connectionState.value
        let keepAlive = self.keepAlive && !connectionState.closing
        if !keepAlive { connectionState.answeredLast = true }
        beforeEnd.value()
        let context = self.context.value
        // The last write completes once everything before it is out, so a closing connection loses nothing.
        let last =
            framing.value == .chunked ? ResponseEncoding.lastChunk : context.channel.allocator.buffer(capacity: 0)
        let written = context.writeAndFlush(NIOAny(last))
        if !keepAlive {
            written.assumeIsolated().whenComplete { _ in
                context.closeAfterAnswer(lingering: connectionState.lingering)
            }
        }
    }
}
