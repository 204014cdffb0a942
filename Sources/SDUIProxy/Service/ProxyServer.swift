import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Synchronization

/// The running proxy: the public and admin listeners, the cache, and the upstream client, on one event loop
/// group with a loop per core.
///
/// ``start(configuration:logger:eventLoopGroup:)`` binds both listeners and returns once they accept
/// connections; ``reload(_:)`` puts a new configuration in force without dropping the cache or connections;
/// ``shutdown(drainTimeout:)`` stops accepting, lets in-flight requests finish up to a deadline, then closes
/// what is left and releases the upstream client.
public final class ProxyServer: Sendable {
    public let runtime: ProxyRuntime
    /// The port the public listener is bound to (useful when the configuration asked for port 0).
    public let publicPort: Int
    /// The port the admin listener is bound to.
    public let adminPort: Int
    /// Prefetches declared URLs, the prefetch endpoint's and navigation targets.
    public let prefetcher: Prefetcher

    /// The context in force.
    public var context: ProxyContext { runtime.context }

    /// Whether either listener still accepts connections (false once a shutdown has begun).
    public var isAcceptingConnections: Bool { channels.contains { $0.isActive } }

    let eventLoopGroup: any EventLoopGroup
    /// The loops the server made itself (``start`` was given no group); shut down last.
    let ownEventLoops: ProxyEventLoops?
    /// Clients a reload replaced, shut down once the exchanges they started can have ended; a shutdown does it at
    /// once, before the loops they run on stop.
    private let retiringClients = Mutex<(next: Int, tasks: [Int: Task<Void, Never>])>((0, [:]))
    var retiringClientCount: Int { retiringClients.withLock { $0.tasks.count } }
    /// Set by the first ``shutdown(drainTimeout:)``: the loops may be gone after it, so nothing runs twice.
    private let shutdownBegan = Atomic(false)
    private let threadPool: NIOThreadPool
    /// One per listener: a helper tracks the connections of a single server channel. Let go of once the
    /// listeners have drained: a helper's deinit completes a promise on a loop, which must still be running.
    private let quiescing: Mutex<[ServerQuiescingHelper]>
    private let channels: [any Channel]
    /// Delivers queued writes; cancelled after the listeners have drained.
    private let queueDelivery: Task<Void, Never>?
    private let warmUps: WarmUps
    /// Caps the public listener's connections; a reload sets a new `limits.maxConnections` on it.
    private let connectionLimiter: ConnectionLimiter
    /// Caps the admin listener's connections.
    private let adminConnectionLimiter: ConnectionLimiter

    /// The warm-up in force (a reload with new declared URLs starts another); `/ready` holds once the first
    /// has finished, so a reload never takes a warm proxy out of rotation.
    final class WarmUps: Sendable {
        private let state: Mutex<(current: WarmUp, anyFinished: Bool)>

        init(_ first: WarmUp) {
            state = Mutex((first, false))
        }

        var current: WarmUp { state.withLock { $0.current } }

        /// Starts the warm-up in force; its end makes the proxy ready for good.
        func startCurrent() {
            current.start().whenComplete { _ in self.state.withLock { $0.anyFinished = true } }
        }

        /// Stops the warm-up in force and starts `warmUp` in its place.
        func replace(with warmUp: WarmUp) {
            let old = state.withLock { state -> WarmUp in
                defer { state.current = warmUp }
                return state.current
            }
            old.stop()
            startCurrent()
        }

        /// Progress of the warm-up in force, reported as finished once any has finished.
        var readiness: WarmUp.Progress {
            state.withLock { state in
                var progress = state.current.progress
                if state.anyFinished { progress.done = progress.total }
                return progress
            }
        }
    }

    private init(
        runtime: ProxyRuntime,
        publicChannel: any Channel,
        adminChannel: any Channel,
        eventLoopGroup: any EventLoopGroup,
        ownEventLoops: ProxyEventLoops?,
        threadPool: NIOThreadPool,
        quiescing: [ServerQuiescingHelper],
        queueDelivery: Task<Void, Never>?,
        prefetcher: Prefetcher,
        warmUps: WarmUps,
        connectionLimiter: ConnectionLimiter,
        adminConnectionLimiter: ConnectionLimiter
    ) {
        self.runtime = runtime
        self.publicPort = publicChannel.localAddress?.port ?? 0
        self.adminPort = adminChannel.localAddress?.port ?? 0
        self.channels = [publicChannel, adminChannel]
        self.eventLoopGroup = eventLoopGroup
        self.ownEventLoops = ownEventLoops
        self.threadPool = threadPool
        self.quiescing = Mutex(quiescing)
        self.queueDelivery = queueDelivery
        self.prefetcher = prefetcher
        self.warmUps = warmUps
        self.connectionLimiter = connectionLimiter
        self.adminConnectionLimiter = adminConnectionLimiter
    }

    /// Builds the proxy from `configuration` and binds its listeners. What ``StartupChecks`` refuses is refused
    /// first, with a ``ConfigurationError``.
    ///
    /// - Parameter eventLoopGroup: the group to run on; by default the server makes its own from `eventLoops` and
    ///   shuts it down with the server. A group passed in is the caller's: `eventLoops` does not apply to it, and
    ///   `sdui_event_loop_yields_total` stays at zero.
    ///   - adminAuthorization: who may use the admin endpoints; by default anyone who can reach the listener.
    public static func start(
        configuration: ProxyConfiguration,
        logger: Logger,
        adminAuthorization: AdminAuthorization = AdminAuthorization(token: nil),
        eventLoopGroup: (any EventLoopGroup)? = nil
    ) async throws -> ProxyServer {
        try await start(
            configuration: configuration,
            logger: logger,
            adminAuthorization: adminAuthorization,
            eventLoopGroup: eventLoopGroup,
            tuning: Tuning()
        )
    }

    /// Settings no deployment has reason to change, which tests set so that what they check does not hang on
    /// how fast the machine runs them.
    struct Tuning {
        /// How long a loop takes a navigation target it found fresh to stay fresh (``RecentlyFreshTargets``).
        var freshTargetRecheckInterval = RecentlyFreshTargets.defaultRecheckInterval
        /// The admin listener's connection cap: enough for operators and probes, few enough that connections
        /// without the token cannot take the process's descriptors.
        var maximumAdminConnections = 256
    }

    static func start(
        configuration: ProxyConfiguration,
        logger: Logger,
        adminAuthorization: AdminAuthorization,
        eventLoopGroup: (any EventLoopGroup)?,
        tuning: Tuning
    ) async throws -> ProxyServer {
        try StartupChecks.check(configuration, adminAuthorization: adminAuthorization)
        let ownEventLoops = eventLoopGroup == nil ? ProxyEventLoops(configuration.eventLoops) : nil
        let group = eventLoopGroup ?? ownEventLoops!.group
        let threadPool = NIOThreadPool(numberOfThreads: 2)
        threadPool.start()

        var writeQueue: WriteQueue?
        let context: ProxyContext
        do {
            if let queueConfiguration = configuration.queue {
                do {
                    writeQueue = try await WriteQueue.open(
                        configuration: queueConfiguration,
                        threadPool: threadPool,
                        eventLoop: group.next(),
                        logger: logger
                    )
                } catch {
                    throw ProxyStartupError(
                        message: "cannot open the write queue in \(queueConfiguration.store): \(error)"
                    )
                }
            }
            let cache = ResponseCache(
                maxBytes: configuration.cache.maxBytes,
                maxEntries: configuration.cache.maxEntries
            )
            let yielding = ownEventLoops?.yielding
            let metrics = ProxyMetrics(snapshot: { [writeQueue] in
                var snapshot = ProxyMetrics.Snapshot(cache.statistics, queueDepth: writeQueue?.depth)
                snapshot.eventLoopYields = yielding?.yieldCount ?? 0
                return snapshot
            })
            context = try ProxyContext.build(
                configuration: configuration,
                cache: cache,
                coalescer: nil,
                client: nil,
                writeQueue: writeQueue,
                metrics: metrics,
                eventLoopGroup: group,
                threadPool: threadPool,
                logger: logger
            )
        } catch {
            try? await writeQueue?.close()
            try? await threadPool.shutdownGracefully()
            try? await ownEventLoops?.group.shutdownGracefully()
            throw error
        }
        let runtime = ProxyRuntime(context)

        do {
            let publicQuiescing = ServerQuiescingHelper(group: group)
            let limiter = ConnectionLimiter(maximum: configuration.limits.maxConnections, metrics: context.metrics)
            let responseBuffers = PerEventLoop(group: group) { ResponseBufferRecycler() }
            let publicChannel = try await bind(configuration.listen, group: group, quiescing: publicQuiescing) {
                channel in
                channel.pipeline.eventLoop.makeCompletedFuture {
                    guard try limiter.admit(channel) else { return }
                    let sync = channel.pipeline.syncOperations
                    // The handler parses requests, does its own pipelining and error answers, and writes
                    // responses as bytes (cache hits pre-encoded), so no handler stands between it and the socket.
                    let handler = PublicHTTPHandler(
                        runtime: runtime,
                        buffers: responseBuffers.value(on: channel.eventLoop),
                        requests: runtime.context.metrics.requestTally(for: channel.eventLoop)
                    )
                    try sync.addHandler(handler)
                }
            }
            let prefetcher = Prefetcher(
                runtime: runtime,
                eventLoopGroup: group,
                freshTargetRecheckInterval: tuning.freshTargetRecheckInterval
            )
            let warmUps = WarmUps(
                WarmUp(
                    prefetcher: prefetcher,
                    configuration: configuration.prefetch,
                    eventLoopGroup: group,
                    logger: logger
                )
            )
            let router = AdminEndpoints.router(
                runtime: runtime,
                prefetcher: prefetcher,
                readiness: { warmUps.readiness }
            )
            let adminQuiescing = ServerQuiescingHelper(group: group)
            let adminLimiter = ConnectionLimiter(
                maximum: tuning.maximumAdminConnections,
                refusal: "too many open admin connections"
            )
            let adminChannel = try await bind(configuration.admin, group: group, quiescing: adminQuiescing) {
                channel in
                channel.pipeline.eventLoop.makeCompletedFuture {
                    guard try adminLimiter.admit(channel) else { return }
                    let sync = channel.pipeline.syncOperations
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    // The limits in force when the connection opens: a reload's apply to the next ones.
                    let limits = runtime.context.configuration.limits
                    try sync.addHandler(
                        AdminGate(
                            authorization: adminAuthorization,
                            idleTimeout: limits.idleTimeout.timeAmount,
                            requestTimeout: limits.requestTimeout.timeAmount
                        )
                    )
                    try sync.addHandler(
                        NIOHTTPServerRequestAggregator(
                            maxContentLength: ProxyConfiguration.Prefetch.largestRequestBytes
                        )
                    )
                    try sync.addHandler(
                        AdminHTTPHandler(router: router, authorization: adminAuthorization, logger: logger)
                    )
                }
            }
            var queueDelivery: Task<Void, Never>?
            if let writeQueue {
                let handlers = QueueResponseHandlers(
                    handlers: writeQueue.configuration.handlers,
                    invalidate: QueueResponseHandlers.invalidation(of: context.cache),
                    eventLoopGroup: group,
                    store: writeQueue.store,
                    logger: logger
                )
                let delivery = QueueDeliveryService(
                    queue: writeQueue,
                    client: CurrentNetworkClient(runtime: runtime),
                    handlers: handlers,
                    eventLoopGroup: group,
                    logger: logger
                )
                queueDelivery = Task { try? await delivery.run() }
            }
            let server = ProxyServer(
                runtime: runtime,
                publicChannel: publicChannel,
                adminChannel: adminChannel,
                eventLoopGroup: group,
                ownEventLoops: ownEventLoops,
                threadPool: threadPool,
                quiescing: [publicQuiescing, adminQuiescing],
                queueDelivery: queueDelivery,
                prefetcher: prefetcher,
                warmUps: warmUps,
                connectionLimiter: limiter,
                adminConnectionLimiter: adminLimiter
            )
            logger.info(
                "listening",
                metadata: [
                    "version": "\(SDUIProxyVersion.current)",
                    "public": "\(configuration.listen.host):\(server.publicPort)",
                    "admin": "\(configuration.admin.host):\(server.adminPort)",
                    "upstream": "\(configuration.upstream.url)",
                    "eventLoops": "\(group.makeIterator().reduce(0) { count, _ in count + 1 })",
                    "yieldAfter": "\(ownEventLoops?.yieldAfterDescription ?? "n/a (the caller's event loops)")",
                ]
            )
            warmUps.startCurrent()
            return server
        } catch {
            try? await writeQueue?.close()
            try? await context.client.shutdown()
            try? await threadPool.shutdownGracefully()
            try? await ownEventLoops?.group.shutdownGracefully()
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
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .childChannelInitializer(childInitializer)
        do {
            return try await bootstrap.bind(host: address.host, port: address.port).get()
        } catch {
            throw ProxyStartupError(message: "cannot listen on \(address.host):\(address.port): \(error)")
        }
    }

    /// Puts `configuration` in force for every request from now on: upstream, headers, platform rules, cache
    /// policies, prefetch lists, limits. The cache, connections and requests in flight are kept. Listener
    /// addresses, the cache's size and the queue cannot change without a restart; such changes are logged
    /// and left as they were.
    public func reload(_ configuration: ProxyConfiguration) async throws {
        guard !shutdownBegan.load(ordering: .relaxed) else {
            throw ProxyStartupError(message: "the proxy is shutting down; the configuration was not reloaded")
        }
        let old = runtime.context
        var configuration = configuration
        let logger = old.logger
        for (name, changed) in [
            ("listen", configuration.listen != old.configuration.listen),
            ("admin", configuration.admin != old.configuration.admin),
            ("cache.maxBytes", configuration.cache.maxBytes != old.configuration.cache.maxBytes),
            ("cache.maxEntries", configuration.cache.maxEntries != old.configuration.cache.maxEntries),
            ("queue", configuration.queue != old.configuration.queue),
            ("eventLoops", configuration.eventLoops != old.configuration.eventLoops),
        ] where changed {
            logger.warning("config reload: \(name) only changes on restart; keeping the running value")
        }
        configuration.listen = old.configuration.listen
        configuration.admin = old.configuration.admin
        configuration.cache.maxBytes = old.configuration.cache.maxBytes
        configuration.cache.maxEntries = old.configuration.cache.maxEntries
        configuration.queue = old.configuration.queue
        configuration.eventLoops = old.configuration.eventLoops

        let upstreamChanged = configuration.upstream != old.configuration.upstream
        if upstreamChanged { try StartupChecks.checkUpstream(configuration.upstream) }
        let context = try ProxyContext.build(
            configuration: configuration,
            cache: old.cache,
            coalescer: old.fetcher.coalescer,
            client: upstreamChanged ? nil : old.client,
            writeQueue: old.writeQueue,
            metrics: old.metrics,
            eventLoopGroup: eventLoopGroup,
            threadPool: threadPool,
            logger: logger
        )
        context.fetcher.observeStoredComponents(old.fetcher.storedComponentObserver)
        connectionLimiter.maximum = configuration.limits.maxConnections
        runtime.replace(with: context)
        logger.info("configuration reloaded", metadata: ["upstream": "\(configuration.upstream.url)"])

        if upstreamChanged {
            // Exchanges already started on the old client may run for up to its timeout, after a forwarded body
            // that may take up to the request timeout to arrive.
            let grace =
                old.configuration.limits.requestTimeout + old.configuration.upstream.timeout + .seconds(1)
            retiringClients.withLock { retiring in
                let id = retiring.next
                retiring.next += 1
                retiring.tasks[id] = Task {
                    try? await Task.sleep(for: grace)
                    try? await old.client.shutdown()
                    _ = self.retiringClients.withLock { $0.tasks.removeValue(forKey: id) }
                }
            }
        }
        if configuration.prefetch != old.configuration.prefetch {
            let warmUp = WarmUp(
                prefetcher: prefetcher,
                configuration: configuration.prefetch,
                eventLoopGroup: eventLoopGroup,
                logger: logger
            )
            warmUps.replace(with: warmUp)
        }
    }

    /// Stops accepting connections, lets in-flight requests finish for up to `drainTimeout`, closes any
    /// connection still open after that, and releases the upstream client and threads.
    ///
    /// A second call returns at once.
    public func shutdown(drainTimeout: TimeAmount = .seconds(10)) async {
        guard shutdownBegan.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else {
            return
        }
        let context = runtime.context
        let logger = context.logger
        logger.info("draining connections")
        warmUps.current.stop()
        // No prefetch starts while draining; those running end once the client shuts down, before the loops stop.
        let prefetchesEnded = prefetcher.stop()
        let drainedListeners = quiescing.withLock { $0 }.map { helper in
            let promise = eventLoopGroup.any().makePromise(of: Void.self)
            helper.initiateShutdown(promise: promise)
            return promise.futureResult
        }
        let drained = EventLoopFuture.andAllComplete(drainedListeners, on: eventLoopGroup.any())
        // Whichever comes first: every connection closed, or the deadline.
        let outcome = drained.eventLoop.makePromise(of: Bool.self)
        let decided = Atomic(false)
        let decide: @Sendable (Bool) -> Void = { drainedInTime in
            if decided.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
                outcome.succeed(drainedInTime)
            }
        }
        drained.whenComplete { _ in decide(true) }
        let deadline = drained.eventLoop.scheduleTask(in: drainTimeout) { decide(false) }
        if try! await outcome.futureResult.get() {
            deadline.cancel()
        } else {
            logger.warning(
                "drain deadline reached, closing the remaining connections",
                metadata: [
                    "public": "\(connectionLimiter.openConnections)",
                    "admin": "\(adminConnectionLimiter.openConnections)",
                ]
            )
            for channel in channels { try? await channel.close() }
            connectionLimiter.closeAll()
            adminConnectionLimiter.closeAll()
        }
        // Deliveries in flight finish and are recorded; what is still pending stays in the store.
        queueDelivery?.cancel()
        await queueDelivery?.value
        try? await context.writeQueue?.close()
        try? await context.client.shutdown()
        try? await prefetchesEnded.get()
        for retiring in retiringClients.withLock({ Array($0.tasks.values) }) {
            retiring.cancel()
            await retiring.value
        }
        try? await threadPool.shutdownGracefully()
        quiescing.withLock { $0.removeAll() }
        try? await ownEventLoops?.group.shutdownGracefully()
        logger.info("stopped")
    }
}

/// The proxy could not start (a port in use, a missing directory, ...).
public struct ProxyStartupError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
