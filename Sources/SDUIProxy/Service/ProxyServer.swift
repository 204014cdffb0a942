import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import SDUIProxyCore

/// The running proxy: the public and admin listeners, the cache, and the upstream client, on one event loop
/// group with a loop per core.
///
/// ``start(configuration:logger:eventLoopGroup:)`` binds both listeners and returns once they accept
/// connections; ``shutdown(drainTimeout:)`` stops accepting, lets in-flight requests finish up to a
/// deadline, then closes what is left and releases the upstream client.
public final class ProxyServer: Sendable {
    public let context: ProxyContext
    /// The port the public listener is bound to (useful when the configuration asked for port 0).
    public let publicPort: Int
    /// The port the admin listener is bound to.
    public let adminPort: Int

    private let eventLoopGroup: any EventLoopGroup
    private let threadPool: NIOThreadPool
    /// One per listener: a helper tracks the connections of a single server channel.
    private let quiescing: [ServerQuiescingHelper]
    private let channels: [any Channel]
    /// Delivers queued writes; cancelled after the listeners have drained.
    private let queueDelivery: Task<Void, Never>?
    /// Prefetches declared URLs, the prefetch endpoint's and navigation targets.
    public let prefetcher: Prefetcher
    /// The start-up warm-up; `GET /ready` answers 200 once it has finished.
    public let warmUp: WarmUp

    private init(
        context: ProxyContext,
        publicChannel: any Channel,
        adminChannel: any Channel,
        eventLoopGroup: any EventLoopGroup,
        threadPool: NIOThreadPool,
        quiescing: [ServerQuiescingHelper],
        queueDelivery: Task<Void, Never>?,
        prefetcher: Prefetcher,
        warmUp: WarmUp
    ) {
        self.queueDelivery = queueDelivery
        self.prefetcher = prefetcher
        self.warmUp = warmUp
        self.context = context
        self.publicPort = publicChannel.localAddress?.port ?? 0
        self.adminPort = adminChannel.localAddress?.port ?? 0
        self.channels = [publicChannel, adminChannel]
        self.eventLoopGroup = eventLoopGroup
        self.threadPool = threadPool
        self.quiescing = quiescing
    }

    /// Builds the proxy from `configuration` and binds its listeners.
    ///
    /// - Parameter eventLoopGroup: the group to run on; by default NIO's process-wide group, a loop per core.
    public static func start(
        configuration: ProxyConfiguration,
        logger: Logger,
        eventLoopGroup: (any EventLoopGroup)? = nil
    ) async throws -> ProxyServer {
        let group = eventLoopGroup ?? MultiThreadedEventLoopGroup.singleton
        let threadPool = NIOThreadPool(numberOfThreads: 2)
        threadPool.start()

        let client: any NetworkClient
        let origin = try UpstreamOrigin(parsing: configuration.upstream.url)
        switch origin {
        case .http(let origin):
            client = HTTPNetworkClient(origin: origin, configuration: configuration.upstream, eventLoopGroup: group)
        case .directory(let path):
            client = try FileNetworkClient(directory: path, threadPool: threadPool)
        }
        let cache = ResponseCache(maxBytes: configuration.cache.maxBytes, maxEntries: configuration.cache.maxEntries)
        var keyedHeaders = Set(configuration.cache.policy.vary)
        for route in configuration.cache.routes { keyedHeaders.formUnion(route.policy.vary) }
        keyedHeaders.insert(configuration.platform.header.lowercased())
        let fetcher = ComponentFetcher(
            cache: cache,
            client: client,
            maxResponseBytes: configuration.upstream.maxResponseBytes,
            keyedHeaders: keyedHeaders,
            tagHeader: configuration.cache.tagHeader,
            coalescingWait: .nanoseconds(Int64(configuration.upstream.timeout.secondsValue * 1e9)) + .seconds(1),
            logger: logger
        )
        var writeQueue: WriteQueue?
        if let queueConfiguration = configuration.queue {
            do {
                writeQueue = try await WriteQueue.open(configuration: queueConfiguration, logger: logger)
            } catch {
                try? await client.shutdown()
                try? await threadPool.shutdownGracefully()
                throw ProxyStartupError(message: "cannot open the write queue in \(queueConfiguration.store): \(error)")
            }
        }
        let context = ProxyContext(
            configuration: configuration,
            cache: cache,
            fetcher: fetcher,
            client: client,
            writeQueue: writeQueue,
            logger: logger
        )

        do {
            let publicQuiescing = ServerQuiescingHelper(group: group)
            let limiter = ConnectionLimiter(maximum: configuration.limits.maxConnections)
            let publicChannel = try await bind(configuration.listen, group: group, quiescing: publicQuiescing) {
                channel in
                channel.pipeline.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(limiter.makeHandler())
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    try sync.addHandler(PublicHTTPHandler(proxy: context))
                }
            }
            let prefetcher = Prefetcher(proxy: context, upstream: origin, eventLoopGroup: group)
            let warmUp = WarmUp(
                prefetcher: prefetcher,
                configuration: configuration.prefetch,
                eventLoopGroup: group,
                logger: logger
            )
            let router = AdminEndpoints.router(for: context, prefetcher: prefetcher, warmUp: warmUp)
            let adminQuiescing = ServerQuiescingHelper(group: group)
            let adminChannel = try await bind(configuration.admin, group: group, quiescing: adminQuiescing) {
                channel in
                channel.pipeline.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    try sync.addHandler(NIOHTTPServerRequestAggregator(maxContentLength: 1 << 20))
                    try sync.addHandler(AdminHTTPHandler(router: router, logger: logger))
                }
            }
            var queueDelivery: Task<Void, Never>?
            if let writeQueue {
                let handlers = QueueResponseHandlers(
                    handlers: writeQueue.configuration.handlers,
                    invalidate: QueueResponseHandlers.invalidation(of: cache),
                    eventLoopGroup: group,
                    logger: logger
                )
                let delivery = QueueDeliveryService(
                    queue: writeQueue,
                    client: client,
                    handlers: handlers,
                    eventLoopGroup: group,
                    maxResponseBytes: configuration.upstream.maxResponseBytes,
                    logger: logger
                )
                queueDelivery = Task { try? await delivery.run() }
            }
            let server = ProxyServer(
                context: context,
                publicChannel: publicChannel,
                adminChannel: adminChannel,
                eventLoopGroup: group,
                threadPool: threadPool,
                quiescing: [publicQuiescing, adminQuiescing],
                queueDelivery: queueDelivery,
                prefetcher: prefetcher,
                warmUp: warmUp
            )
            logger.info(
                "listening",
                metadata: [
                    "public": "\(configuration.listen.host):\(server.publicPort)",
                    "admin": "\(configuration.admin.host):\(server.adminPort)",
                    "upstream": "\(configuration.upstream.url)",
                ]
            )
            warmUp.start()
            return server
        } catch {
            try? await writeQueue?.close()
            try? await client.shutdown()
            try? await threadPool.shutdownGracefully()
            throw error
        }
    }

    private static func bind(
        _ address: ProxyConfiguration.ListenAddress,
        group: any EventLoopGroup,
        quiescing: ServerQuiescingHelper,
        childInitializer: @escaping @Sendable (any Channel) -> EventLoopFuture<Void>
    ) async throws -> any Channel {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .childChannelInitializer(childInitializer)
        do {
            return try await bootstrap.bind(host: address.host, port: address.port).get()
        } catch {
            throw ProxyStartupError(message: "cannot listen on \(address.host):\(address.port): \(error)")
        }
    }

    /// Stops accepting connections, lets in-flight requests finish for up to `drainTimeout`, closes any
    /// connection still open after that, and releases the upstream client and threads.
    public func shutdown(drainTimeout: TimeAmount = .seconds(10)) async {
        let logger = context.logger
        logger.info("draining connections")
        warmUp.stop()
        let drainedListeners = quiescing.map { helper in
            let promise = eventLoopGroup.any().makePromise(of: Void.self)
            helper.initiateShutdown(promise: promise)
            return promise.futureResult
        }
        let drained = EventLoopFuture.andAllComplete(drainedListeners, on: eventLoopGroup.any())
        // Whichever comes first: every connection closed, or the deadline.
        let outcome = drained.eventLoop.makePromise(of: Bool.self)
        drained.whenComplete { _ in outcome.succeed(true) }
        let deadline = drained.eventLoop.scheduleTask(in: drainTimeout) { outcome.succeed(false) }
        if try! await outcome.futureResult.get() {
            deadline.cancel()
        } else {
            logger.warning("drain deadline reached, closing the remaining connections")
            for channel in channels { try? await channel.close() }
        }
        // Deliveries in flight finish and are recorded; what is still pending stays in the store.
        queueDelivery?.cancel()
        await queueDelivery?.value
        try? await context.writeQueue?.close()
        try? await context.client.shutdown()
        try? await threadPool.shutdownGracefully()
        logger.info("stopped")
    }
}

/// The proxy could not start (a port in use, a missing directory, ...).
public struct ProxyStartupError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
