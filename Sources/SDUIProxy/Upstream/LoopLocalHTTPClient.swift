import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Synchronization

/// A ``NetworkClient`` for HTTP and HTTPS backends whose connections live on the event loop of the request that
/// uses them: each loop keeps its own pool of keep-alive HTTP/1.1 connections, so a miss never crosses threads
/// and takes no lock. Cache fills (`fetch`) and pass-through (`forward`) share the pool, and
/// `upstream.maxConnections` bounds them together; forwards hold at most `upstream.maxForwardConnections` of it,
/// so that slow forwards never leave a cache miss without a connection.
///
/// Its contract: the connect timeout, `upstream.timeout` for the head (from when the backend has the whole
/// request), `upstream.bodyIdleTimeout` for each silence of the body, the body limit, and failures mapped to
/// ``ProxyError`` kinds `network`, `timeout` and `upstreamTooLarge`. Interim responses reach the client: each
/// 1xx is passed on as it arrives. An idempotent request without a streamed body that fails on a reused
/// connection before any byte of the answer arrived (the backend closed an idle connection) is sent once more on
/// a new connection (``StaleConnectionRetry``).
public final class LoopLocalHTTPClient: NetworkClient {
    private let origin: UpstreamOrigin.HTTPOrigin
    /// The origin's `Host` value, formatted once rather than per request.
    private let hostHeader: String
    /// `configuration.timeout` and `bodyIdleTimeout`, converted once rather than per exchange.
    private let timeout: TimeAmount
    private let bodyIdleTimeout: TimeAmount
    private let configuration: ProxyConfiguration.Upstream
    /// The pools of the group's event loops, made up front: every miss finds its loop's pool without a lock
    /// that both loops would take.
    private let groupPools: EventLoopTable<PoolState>
    /// Pools of loops from outside the group, made when first asked for, and whether the client is shut down
    /// (a pool made after that opens no connection).
    private let outsidePools: Mutex<(pools: [ObjectIdentifier: PoolState], shutDown: Bool)>
    /// How connections are wrapped for an `https://` backend; nil for plain HTTP.
    private let tls: UpstreamTLS?

    /// The bytes of `upstream.caFile` the client trusts, as it read them; nil without one.
    var authorityFile: [UInt8]? { tls?.authorityFile }

    /// Throws when an `https://` backend's TLS cannot be set up (its `upstream.caFile`).
    public init(
        origin: UpstreamOrigin.HTTPOrigin,
        configuration: ProxyConfiguration.Upstream,
        eventLoopGroup: any EventLoopGroup
    ) throws(ConfigurationError) {
        let tls = origin.scheme == "https" ? try UpstreamTLS(host: origin.host, caFile: configuration.caFile) : nil
        self.origin = origin
        self.tls = tls
        self.hostHeader = origin.hostHeader
        self.timeout = configuration.timeout.timeAmount
        self.bodyIdleTimeout = configuration.bodyIdleTimeout.timeAmount
        self.configuration = configuration
        self.groupPools = EventLoopTable(group: eventLoopGroup) { eventLoop in
            Self.makePool(on: eventLoop, origin: origin, tls, configuration)
        }
        self.outsidePools = Mutex(([:], false))
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
        fetch(request, maxBodyBytes: maxBodyBytes, budget: nil, on: eventLoop, completion: completion)
    }

    /// The connection takes the body's bytes from `budget` as it learns them (all at once when the head gives the
    /// length) and gives them back when the exchange ends.
    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        budget: ByteBudget,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        fetch(request, maxBodyBytes: maxBodyBytes, budget: .some(budget), on: eventLoop, completion: completion)
    }

    private func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        budget: ByteBudget?,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        let pool = self.pool(for: eventLoop)
        let deadline = NIODeadline.now() + timeout
        // The backend's `Host` and the framing are written by the encoder: the fields go out as they are, uncopied.
        let encoded: ByteBuffer
        do {
            encoded = try encode(request, framing: Self.framingWithHead(of: request), body: request.body)
        } catch {
            return eventLoop.execute { completion(.failure(error)) }
        }
        let exchange = Exchange(
            request: encoded,
            isHEAD: request.method.isHEAD,
            mayResend: StaleConnectionRetry.mayResend(request.method, streamsBody: false),
            maxBodyBytes: maxBodyBytes,
            budget: budget,
            deadline: deadline,
            bodyIdleTimeout: bodyIdleTimeout,
            interim: request.interim
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
        let promise = eventLoop.makePromise(of: Void.self)
        forward(request, body: body, on: eventLoop, to: sink) { promise.completeWith($0) }
        return promise.futureResult
    }

    public func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        guard body == nil || body?.eventLoop === eventLoop else {
            let error = ProxyError(.internalError, "a request body must stream on the event loop of its exchange")
            return eventLoop.execute { completion(.failure(error)) }
        }
        // The framing is this hop's, written by the encoder in place of the client's: the body's length when the
        // client gave it, chunks when it did not.
        let framing: HTTPWireFormat.RequestFraming
        if let body {
            framing = body.contentLength.map { .length($0) } ?? .chunked
        } else {
            framing = Self.framingWithHead(of: request)
        }
        let encoded: ByteBuffer
        do {
            encoded = try encode(request, framing: framing, body: body == nil ? request.body : nil)
        } catch {
            return eventLoop.execute { completion(.failure(error)) }
        }
        let forwarding = ForwardedExchange(
            sink: sink,
            body: body,
            isChunked: framing == .chunked,
            headTimeout: timeout,
            on: eventLoop,
            completion: completion
        )
        let exchange = Exchange(
            request: encoded,
            isHEAD: request.method.isHEAD,
            mayResend: StaleConnectionRetry.mayResend(request.method, streamsBody: body != nil),
            use: request.fillsCache ? .fill : .forward,
            maxBodyBytes: .max,
            budget: nil,
            deadline: .now() + timeout,
            bodyIdleTimeout: bodyIdleTimeout,
            interim: nil,
            forwarding: forwarding
        )
        let pool = self.pool(for: eventLoop)
        // Started in place when called on the loop, as nearly every forward is: a closure to hand to the loop
        // would be made (and freed) for nothing.
        guard eventLoop.inEventLoop else {
            return eventLoop.execute { Self.start(forwarding, exchange, in: pool) }
        }
        Self.start(forwarding, exchange, in: pool)
    }

    private static func start(_ forwarding: ForwardedExchange, _ exchange: Exchange, in pool: PoolState) {
        // From now on, a body that fails answers the caller at once, even while the exchange waits for a
        // connection; one that failed already takes none.
        forwarding.watchBody()
        guard forwarding.abandonment == nil else { return }
        pool.run(exchange) { result in forwarding.connectionEnded(result) }
    }

    /// The framing of a request whose body, if it has one, goes in the same buffer as its head: that body's
    /// length, or a length of 0 for a method that is expected to carry one; none for a GET.
    private static func framingWithHead(of request: UpstreamRequest) -> HTTPWireFormat.RequestFraming {
        if let body = request.body { return .length(body.readableBytes) }
        switch request.method {
        case .POST, .PUT, .PATCH: return .length(0)
        default: return .none
        }
    }

    /// `request` as bytes on the wire, its fields framed by `framing`, and `body` when it goes with the head; under
    /// the origin's base path, with its `Host`.
    private func encode(
        _ request: UpstreamRequest,
        framing: HTTPWireFormat.RequestFraming,
        body: ByteBuffer?
    ) throws(ProxyError) -> ByteBuffer {
        try HTTPWireFormat.encodeRequest(
            method: request.method,
            target: origin.basePath.isEmpty ? request.target : origin.basePath + request.target,
            host: hostHeader,
            fields: request.fields,
            framing: framing,
            body: body
        )
    }

    public func shutdown() async throws {
        let all =
            groupPools.allValues
            + outsidePools.withLock { state in
                state.shutDown = true
                return Array(state.pools.values)
            }
        for pool in all {
            try? await pool.eventLoop.submit { pool.closeAll() }.get()
        }
    }

    private func pool(for eventLoop: any EventLoop) -> PoolState {
        if let pool = groupPools[eventLoop] { return pool }
        return outsidePools.withLock { state in
            if let pool = state.pools[ObjectIdentifier(eventLoop)] { return pool }
            let pool = Self.makePool(on: eventLoop, origin: origin, tls, configuration, closed: state.shutDown)
            state.pools[ObjectIdentifier(eventLoop)] = pool
            return pool
        }
    }

    private static func makePool(
        on eventLoop: any EventLoop,
        origin: UpstreamOrigin.HTTPOrigin,
        _ tls: UpstreamTLS?,
        _ configuration: ProxyConfiguration.Upstream,
        closed: Bool = false
    ) -> PoolState {
        PoolState(
            eventLoop: eventLoop,
            host: origin.host,
            port: origin.port,
            tls: tls,
            connectTimeout: configuration.connectTimeout.timeAmount,
            maximumConnections: max(1, configuration.maxConnections),
            maximumForwardConnections: configuration.forwardConnectionLimit,
            closed: closed
        )
    }

    struct Exchange {
        /// The request as bytes on the wire, head and body.
        var request: ByteBuffer
        var isHEAD: Bool
        /// Whether the request may be sent again after a reused connection failed before answering.
        var mayResend: Bool
        /// Which share of the pool the exchange takes its connection from.
        var use: UpstreamPoolStateMachine.Use = .fill
        var maxBodyBytes: Int
        /// What the body's bytes are taken from while they are held (cache fills); nil for none.
        var budget: ByteBudget?
        /// When the response head must have come (`upstream.timeout`).
        var deadline: NIODeadline
        /// How long the body may then go without a byte (`upstream.bodyIdleTimeout`).
        var bodyIdleTimeout: TimeAmount
        /// Where interim responses go; nil to let them go.
        var interim: InterimRelay?
        /// The caller's side of a forwarded exchange, whose response streams to it; nil for a cache fill.
        var forwarding: ForwardedExchange? = nil
    }
}
