import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Synchronization

/// A ``NetworkClient`` for plain-HTTP backends whose connections live on the event loop of the request that
/// uses them: each loop keeps its own pool of keep-alive HTTP/1.1 connections, so a miss never crosses threads
/// and takes no lock. This is the cache-fill path (`fetch`); streamed pass-through (`forward`) goes through
/// AsyncHTTPClient, which does that best.
///
/// Same contract as ``HTTPNetworkClient``: connect timeout, an overall deadline per exchange, the body limit,
/// and failures mapped to ``ProxyError`` kinds `network`, `timeout` and `upstreamTooLarge`. A request that
/// fails on a reused connection before any byte of the answer arrived (the backend closed an idle connection)
/// is sent once more on a new connection.
public final class LoopLocalHTTPClient: NetworkClient {
    private let origin: UpstreamOrigin.HTTPOrigin
    /// The origin's `Host` value, formatted once rather than per request.
    private let hostHeader: String
    /// `configuration.timeout`, converted once rather than per exchange.
    private let timeout: TimeAmount
    private let configuration: ProxyConfiguration.Upstream
    /// The pools of the group's event loops, made up front: every miss finds its loop's pool without a lock
    /// that both loops would take.
    private let groupPools: [ObjectIdentifier: PoolState]
    /// Pools of loops from outside the group, made when first asked for, and whether the client is shut down
    /// (a pool made after that opens no connection).
    private let outsidePools: Mutex<(pools: [ObjectIdentifier: PoolState], shutDown: Bool)>
    private let streaming: HTTPNetworkClient

    public init(
        origin: UpstreamOrigin.HTTPOrigin,
        configuration: ProxyConfiguration.Upstream,
        eventLoopGroup: any EventLoopGroup
    ) {
        precondition(origin.scheme == "http", "the loop-local client speaks plain HTTP only")
        self.origin = origin
        self.hostHeader = origin.hostHeader
        self.timeout = configuration.timeout.timeAmount
        self.configuration = configuration
        var groupPools: [ObjectIdentifier: PoolState] = [:]
        for eventLoop in eventLoopGroup.makeIterator() {
            groupPools[ObjectIdentifier(eventLoop)] = Self.makePool(on: eventLoop, origin: origin, configuration)
        }
        self.groupPools = groupPools
        self.outsidePools = Mutex(([:], false))
        self.streaming = HTTPNetworkClient(origin: origin, configuration: configuration, eventLoopGroup: eventLoopGroup)
    }

    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<UpstreamResponse> {
        let promise = eventLoop.makePromise(of: UpstreamResponse.self)
        fetch(request, maxBodyBytes: maxBodyBytes, on: eventLoop, completion: promise.completeWith)
        return promise.futureResult
    }

    /// The exchange is completed when its connection reports its end to the pool, without a promise of its own.
    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        let pool = self.pool(for: eventLoop)
        let deadline = NIODeadline.now() + timeout
        // The backend's `Host` is written by the encoder: a GET's headers go out as they are, uncopied.
        var headers = request.headers
        if let body = request.body {
            headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
        } else if request.method == .POST || request.method == .PUT || request.method == .PATCH {
            headers.replaceOrAdd(name: "Content-Length", value: "0")
        }
        let encoded: ByteBuffer
        do {
            encoded = try HTTPWireFormat.encodeRequest(
                method: request.method,
                target: origin.basePath.isEmpty ? request.target : origin.basePath + request.target,
                host: hostHeader,
                headers: headers,
                body: request.body
            )
        } catch {
            return eventLoop.execute { completion(.failure(error)) }
        }
        let exchange = Exchange(
            request: encoded,
            isHEAD: request.method == .HEAD,
            maxBodyBytes: maxBodyBytes,
            deadline: deadline
        )
        if eventLoop.inEventLoop {
            return pool.run(exchange, completion: completion)
        }
        eventLoop.execute { pool.run(exchange, completion: completion) }
    }

    public func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink
    ) -> EventLoopFuture<Void> {
        streaming.forward(request, body: body, on: eventLoop, to: sink)
    }

    public func shutdown() async throws {
        let all =
            Array(groupPools.values)
            + outsidePools.withLock { state in
                state.shutDown = true
                return Array(state.pools.values)
            }
        for pool in all {
            try? await pool.eventLoop.submit { pool.closeAll() }.get()
        }
        try await streaming.shutdown()
    }

    private func pool(for eventLoop: any EventLoop) -> PoolState {
        if let pool = groupPools[ObjectIdentifier(eventLoop)] { return pool }
        return outsidePools.withLock { state in
            if let pool = state.pools[ObjectIdentifier(eventLoop)] { return pool }
            let pool = Self.makePool(on: eventLoop, origin: origin, configuration, closed: state.shutDown)
            state.pools[ObjectIdentifier(eventLoop)] = pool
            return pool
        }
    }

    private static func makePool(
        on eventLoop: any EventLoop,
        origin: UpstreamOrigin.HTTPOrigin,
        _ configuration: ProxyConfiguration.Upstream,
        closed: Bool = false
    ) -> PoolState {
        PoolState(
            eventLoop: eventLoop,
            host: origin.host,
            port: origin.port,
            connectTimeout: configuration.connectTimeout.timeAmount,
            maximumConnections: max(1, configuration.maxConnections),
            closed: closed
        )
    }

    struct Exchange {
        /// The request as bytes on the wire, head and body.
        var request: ByteBuffer
        var isHEAD: Bool
        var maxBodyBytes: Int
        var deadline: NIODeadline
    }
}

/// The connections of one event loop: idle ones ready for reuse, and requests waiting for a connection when
/// the pool is full.
///
/// Confined to its event loop: it is created with the client (for the group's loops) or under the client's
/// lock (for others), and otherwise used from ``run(_:completion:)`` and ``closeAll()``, which run on that loop
/// (checked).
final class PoolState: @unchecked Sendable {
    let eventLoop: any EventLoop
    private let host: String
    private let port: Int
    private let connectTimeout: TimeAmount
    private let maximumConnections: Int
    private var idle: [UpstreamConnectionHandler] = []
    private var open = 0
    private var waiting: CircularBuffer<EventLoopPromise<UpstreamConnectionHandler?>> = []
    private var closed: Bool

    init(
        eventLoop: any EventLoop,
        host: String,
        port: Int,
        connectTimeout: TimeAmount,
        maximumConnections: Int,
        closed: Bool = false
    ) {
        self.closed = closed
        self.eventLoop = eventLoop
        self.host = host
        self.port = port
        self.connectTimeout = connectTimeout
        self.maximumConnections = maximumConnections
    }

    /// What an exchange's caller is told, once, on the pool's loop.
    typealias Completion = @Sendable (Result<UpstreamResponse, any Error>) -> Void

    /// Runs `exchange` on an idle connection, a new one, or the first to come free.
    func run(_ exchange: LoopLocalHTTPClient.Exchange, completion: @escaping Completion) {
        eventLoop.preconditionInEventLoop()
        start(exchange, retryOnStaleConnection: true, completion: completion)
    }

    /// The common case, an idle connection ready, takes no future and no callback: the connection keeps
    /// `completion` and hands it back to ``exchangeEnded(_:on:_:retryIfStale:_:)``.
    private func start(
        _ exchange: LoopLocalHTTPClient.Exchange,
        retryOnStaleConnection: Bool,
        completion: @escaping Completion
    ) {
        if let connection = takeIdleConnection() {
            connection.send(exchange, retryIfStale: retryOnStaleConnection, completion: completion)
            return
        }
        acquireNew(deadline: exchange.deadline).whenComplete { result in
            switch result {
            case .success(let connection):
                connection.send(exchange, retryIfStale: false, completion: completion)
            case .failure(let error):
                completion(.failure(Self.proxyError(error)))
            }
        }
    }

    /// What `connection` tells its pool when the exchange it was sent ends: the connection is free again, or
    /// the exchange goes once more on another one.
    func exchangeEnded(
        _ result: Result<UpstreamResponse, any Error>,
        on connection: UpstreamConnectionHandler,
        _ exchange: LoopLocalHTTPClient.Exchange,
        retryIfStale: Bool,
        _ completion: @escaping Completion
    ) {
        switch result {
        case .success(let response):
            release(connection)
            completion(.success(response))
        case .failure(UpstreamConnectionHandler.Failure.closedBeforeResponse) where retryIfStale:
            // The backend closed a reused idle connection as the request went out: nothing was answered.
            start(exchange, retryOnStaleConnection: false, completion: completion)
        case .failure(let error):
            completion(.failure(Self.proxyError(error)))
        }
    }

    func closeAll() {
        eventLoop.preconditionInEventLoop()
        closed = true
        for connection in idle { connection.close() }
        idle.removeAll()
        while let waiter = waiting.popFirst() {
            waiter.fail(ProxyError(.unavailable, "the upstream client is shutting down"))
        }
    }

    private func takeIdleConnection() -> UpstreamConnectionHandler? {
        guard !closed else { return nil }
        while let connection = idle.popLast() {
            if connection.isUsable { return connection }
            open -= 1
        }
        return nil
    }

    /// A new connection, or, when the pool is full, the first one another exchange releases.
    private func acquireNew(deadline: NIODeadline) -> EventLoopFuture<UpstreamConnectionHandler> {
        guard !closed else {
            return eventLoop.makeFailedFuture(ProxyError(.unavailable, "the upstream client is shutting down"))
        }
        if open < maximumConnections { return connect(deadline: deadline) }
        let promise = eventLoop.makePromise(of: UpstreamConnectionHandler?.self)
        waiting.append(promise)
        let timeout = eventLoop.scheduleTask(deadline: deadline) {
            promise.fail(ProxyError(.timeout, "no connection to the backend became free in time"))
        }
        return promise.futureResult.always { _ in timeout.cancel() }.flatMap { connection in
            // nil: a connection closed and left room to open a new one.
            connection.map { self.eventLoop.makeSucceededFuture($0) } ?? self.connect(deadline: deadline)
        }
    }

    private func connect(deadline: NIODeadline) -> EventLoopFuture<UpstreamConnectionHandler> {
        open += 1
        let handler = UpstreamConnectionHandler(eventLoop: eventLoop, pool: self)
        let timeout = min(connectTimeout, deadline - .now())
        return ClientBootstrap(group: eventLoop)
            .connectTimeout(max(timeout, .milliseconds(1)))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: host, port: port)
            .map { channel in
                channel.closeFuture.whenComplete { _ in self.connectionClosed(handler) }
                return handler
            }
            .flatMapErrorThrowing { error in
                self.open -= 1
                self.wakeWaiter(with: nil)
                throw error
            }
    }

    private func release(_ connection: UpstreamConnectionHandler) {
        guard connection.isUsable, !closed else {
            connection.close()
            return
        }
        if let waiter = waiting.popFirst() {
            waiter.succeed(connection)
        } else {
            idle.append(connection)
        }
    }

    private func connectionClosed(_ connection: UpstreamConnectionHandler) {
        if let index = idle.firstIndex(where: { $0 === connection }) {
            idle.remove(at: index)
        }
        open -= 1
        wakeWaiter(with: nil)
    }

    private func wakeWaiter(with connection: UpstreamConnectionHandler?) {
        if open < maximumConnections, let waiter = waiting.popFirst() { waiter.succeed(connection) }
    }

    static func proxyError(_ error: any Error) -> ProxyError {
        if let error = error as? ProxyError { return error }
        if let failure = error as? UpstreamConnectionHandler.Failure {
            switch failure {
            case .timedOut: return ProxyError(.timeout, "the backend did not answer in time")
            case .tooLarge(let limit):
                return ProxyError(.upstreamTooLarge, "the backend's response is larger than \(limit) bytes")
            case .closedBeforeResponse, .closedDuringResponse:
                return ProxyError(.network, "the backend closed the connection")
            case .busy: return ProxyError(.internalError, "an upstream connection was used twice")
            case .malformed(let failure): return failure.proxyError
            }
        }
        if case .connectTimeout(_)? = error as? ChannelError {
            return ProxyError(.timeout, "connecting to the backend timed out")
        }
        return ProxyError(
            .network,
            "cannot reach the backend: \(UpstreamFailureReason.reason(for: error))",
            detail: "\(error)"
        )
    }
}

/// One keep-alive connection to the backend: one exchange at a time, the response read whole, and its end told
/// to the connection's pool.
///
/// It speaks HTTP/1.1 itself, with no codec handlers in the pipeline: the request goes out as the bytes
/// ``HTTPWireFormat/encodeRequest(method:target:host:headers:body:)`` made, and the answer is read with
/// ``HTTPResponseParser``.
///
/// Confined to its channel's event loop, like its pool: every call and callback happens on that loop.
final class UpstreamConnectionHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum Failure: Error, Equatable {
        case closedBeforeResponse
        case closedDuringResponse
        case timedOut
        case tooLarge(Int)
        case busy
        case malformed(HTTPParseFailure)
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
        var keepAlive = true
    }

    /// The largest body taken as the read buffer's own slice when it arrives whole in one read (see
    /// ``receive(_:)``): what a cache entry copies into its own array anyway.
    static let maximumBorrowedBodyBytes = CachedResponse.maximumExactBodyBytes

    private let eventLoop: any EventLoop
    /// The pool this connection belongs to, and reports to. A strong reference: the pool holds an idle
    /// connection only until the connection closes or the pool closes all.
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

    init(eventLoop: any EventLoop, pool: PoolState) {
        self.eventLoop = eventLoop
        self.pool = pool
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
        let sent = Current(exchange: exchange, retryIfStale: retryIfStale, completion: completion)
        guard let context else { return end(sent, with: .failure(Failure.closedBeforeResponse)) }
        guard current == nil else { return end(sent, with: .failure(Failure.busy)) }
        current = sent
        parser.expectResponse(isHEAD: exchange.isHEAD)
        armTimer(for: exchange.deadline)
        context.writeAndFlush(wrapOutboundOut(exchange.request), promise: nil)
    }

    private func end(_ inFlight: Current, with result: Result<UpstreamResponse, any Error>) {
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
        guard let maxBodyBytes = current?.exchange.maxBodyBytes else { return }
        switch part {
        case .head(let head, let keepAlive, let length):
            if let length, length > maxBodyBytes {
                return fail(with: .tooLarge(maxBodyBytes), closing: true)
            }
            current?.head = head
            current?.keepAlive = keepAlive
            current?.length = length
        case .body(var part):
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
        if let inFlight = current {
            // A body that runs to the close ends here; anything else was cut short.
            if parser.bodyEndsWithConnection, let part = try? parser.finish() {
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
        if let inFlight = current {
            current = nil
            end(inFlight, with: .failure(error))
        }
        context.close(promise: nil)
    }

    private func fail(with failure: Failure, closing: Bool) {
        let inFlight = current
        current = nil
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
        if inFlight.exchange.deadline <= .now() {
            fail(with: .timedOut, closing: true)
        } else {
            armTimer(for: inFlight.exchange.deadline)
        }
    }

    private func disarmTimer() {
        timer?.cancel()
        timer = nil
    }
}
