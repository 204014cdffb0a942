import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import Prometheus
import SDUIProxyCore
import ServiceLifecycle
import Synchronization
import UnixSignals

/// The running proxy: the public and admin listeners, the cache, and the upstream client, on one event loop
/// group with a loop per core.
///
/// Its parts run as swift-service-lifecycle services in one `ServiceGroup`, in this order: queue delivery, the
/// prefetcher, the warm-up, the admin listener, the public listener. The group starts them together and shuts
/// them down in reverse: the public listener drains first (it stops accepting, requests in flight finish, up to
/// the drain timeout), then the admin listener (within what is left of the same timeout), then the warm-up and
/// the prefetcher stop, then queue delivery finishes the deliveries in flight. What the server made itself (the
/// write queue's store, the upstream client, its thread pool and its event loops) is released after the group
/// has ended. If one service fails (a port in use), the group cancels the others and ends with its error.
///
/// ``start(configuration:logger:adminAuthorization:eventLoopGroup:)`` runs the group in the background and
/// returns once both listeners accept connections; ``shutdown(drainTimeout:)`` shuts it down and waits. The
/// command line runs the same group in the foreground, with signals, through ``ProxyService``.
/// ``reload(_:)`` puts a new configuration in force without dropping the cache or connections.
public final class ProxyServer: Sendable {
    public let runtime: ProxyRuntime
    /// Prefetches declared URLs, the prefetch endpoint's and navigation targets.
    public let prefetcher: Prefetcher

    /// The context in force.
    public var context: ProxyContext { runtime.context }

    /// The port the public listener is bound to (useful when the configuration asked for port 0); 0 until it is.
    public var publicPort: Int { publicListener.listening.reported ?? 0 }
    /// The port the admin listener is bound to; 0 until it is.
    public var adminPort: Int { adminListener.listening.reported ?? 0 }

    /// Whether either listener still accepts connections (false once a shutdown has begun).
    public var isAcceptingConnections: Bool {
        publicListener.isAcceptingConnections || adminListener.isAcceptingConnections
    }

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
    let publicListener: ListenerService
    let adminListener: ListenerService
    private let warmUps: WarmUps
    /// Runs the refreshes and retries of the warm-ups a reload starts, as of the first.
    private let warmUpScheduler: WarmUp.Scheduler?
    /// The services of the group, in start order (they shut down in reverse).
    private let services: [any Service]
    private let drainDeadline: DrainDeadline
    /// The group once ``run(gracefulShutdownSignals:additionalServices:drainTimeout:)`` has made it, and whether a shutdown
    /// was asked for before.
    private let group = Mutex<(group: ServiceGroup?, shutdownRequested: Bool)>((nil, false))
    /// Reported once the proxy listens and has said so in the log, or with why it cannot.
    private let announced = StartupSignal<Void>()
    /// Reported when the group has ended and what the server made itself is released.
    private let stopped = StartupSignal<Void>()
    /// Caps the public listener's connections; a reload sets a new `limits.maxConnections` on it.
    private let connectionLimiter: ConnectionLimiter
    /// The public listener's certificate and key, when it speaks TLS; a reload reads them again.
    private let listenerTLS: ListenerTLS?

    private init(
        runtime: ProxyRuntime,
        eventLoopGroup: any EventLoopGroup,
        ownEventLoops: ProxyEventLoops?,
        threadPool: NIOThreadPool,
        services: [any Service],
        publicListener: ListenerService,
        adminListener: ListenerService,
        prefetcher: Prefetcher,
        warmUps: WarmUps,
        warmUpScheduler: WarmUp.Scheduler?,
        drainDeadline: DrainDeadline,
        connectionLimiter: ConnectionLimiter,
        listenerTLS: ListenerTLS?
    ) {
        self.runtime = runtime
        self.eventLoopGroup = eventLoopGroup
        self.ownEventLoops = ownEventLoops
        self.threadPool = threadPool
        self.services = services
        self.publicListener = publicListener
        self.adminListener = adminListener
        self.prefetcher = prefetcher
        self.warmUps = warmUps
        self.warmUpScheduler = warmUpScheduler
        self.drainDeadline = drainDeadline
        self.connectionLimiter = connectionLimiter
        self.listenerTLS = listenerTLS
    }

    /// Builds the proxy from `configuration`, runs its services and returns once both listeners accept
    /// connections. What ``StartupChecks`` refuses is refused first, with a ``ConfigurationError``; a service
    /// that cannot start (a port in use) stops the others, and its error is thrown once they have stopped.
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

    static func start(
        configuration: ProxyConfiguration,
        logger: Logger,
        adminAuthorization: AdminAuthorization,
        eventLoopGroup: (any EventLoopGroup)?,
        tuning: Tuning
    ) async throws -> ProxyServer {
        let server = try await prepare(
            configuration: configuration,
            logger: logger,
            adminAuthorization: adminAuthorization,
            eventLoopGroup: eventLoopGroup,
            tuning: tuning
        )
        let running = Task { try await server.run() }
        do {
            try await server.announced.value
        } catch {
            // The group cancels the other services when one fails: their error once they have stopped.
            try await running.value
            throw error
        }
        return server
    }

    /// Builds the proxy from `configuration` without starting anything that serves: the context, the write
    /// queue's store, and the services ``run(gracefulShutdownSignals:additionalServices:drainTimeout:)`` runs.
    static func prepare(
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
        let compressionPool = tuning.compressionPool ?? CompressionPool()
        compressionPool.start()

        var writeQueue: WriteQueue?
        let registry = PrometheusCollectorRegistry()
        let context: ProxyContext
        let fleetLog: FleetLog?
        let fleetPrefetcher = FleetLog.PrefetcherSlot()
        var tracer = tuning.tracer
        var spanExporter: (any Service)?
        do {
            if tracer == nil,
                let otlp = try RequestTracer.otlp(configuration.tracing, logger: logger)
            {
                (tracer, spanExporter) = (otlp.tracer, otlp.exporter)
            }
            if let queueConfiguration = configuration.queue {
                do {
                    writeQueue = try await WriteQueue.open(
                        configuration: queueConfiguration,
                        threadPool: threadPool,
                        eventLoop: group.next(),
                        replicaName: configuration.cluster.replicaNameOfThisProcess,
                        claimMetrics: QueueClaimMetrics(registry: registry),
                        logger: logger
                    )
                } catch {
                    let store = (try? queueConfiguration.storeLocation)?.description ?? "queue.store"
                    throw ProxyStartupError(message: "cannot open the write queue in \(store): \(error)")
                }
            }
            let cache = ResponseCache(
                maxBytes: configuration.cache.maxBytes,
                maxEntries: configuration.cache.maxEntries
            )
            let yielding = ownEventLoops?.yielding
            let metrics = ProxyMetrics(
                registry: registry,
                snapshot: { [writeQueue] in
                    var snapshot = ProxyMetrics.Snapshot(cache.statistics, queueDepth: writeQueue?.depth)
                    snapshot.queueIdentifiers = writeQueue?.identifierFigures
                    snapshot.eventLoopYields = yielding?.yieldCount ?? 0
                    return snapshot
                }
            )
            fleetLog = try FleetLog.make(
                for: configuration,
                recordWait: tuning.fleetRecordWait,
                queryTimeout: tuning.fleetQueryTimeout,
                cache: cache,
                prefetcher: fleetPrefetcher,
                metrics: metrics,
                eventLoopGroup: group,
                logger: logger
            )
            context = try ProxyContext.build(
                configuration: configuration,
                cache: cache,
                coalescer: nil,
                client: nil,
                writeQueue: writeQueue,
                metrics: metrics,
                invalidator: CacheInvalidator(cache: cache, fleet: fleetLog),
                eventLoopGroup: group,
                threadPool: threadPool,
                compressionPool: compressionPool,
                tracer: tracer,
                logger: logger
            )
        } catch {
            try? await writeQueue?.close()
            try? await threadPool.shutdownGracefully()
            try? await compressionPool.shutdownGracefully()
            try? await ownEventLoops?.group.shutdownGracefully()
            throw error
        }
        let runtime = ProxyRuntime(context)
        context.metrics.setRouteText { runtime.context.routeMetrics?.render() ?? "" }
        let drainDeadline = DrainDeadline(timeout: .seconds(10))

        let limiter = ConnectionLimiter(maximum: configuration.limits.maxConnections)
        let listenerTLS = try configuration.listenProtocols.tls.map {
            try ListenerTLS($0, http2: configuration.listenProtocols.http2, logger: logger)
        }
        let connections = PublicConnectionPipeline(
            runtime: runtime,
            responseBuffers: PerEventLoop(group: group) { ResponseBufferRecycler() },
            yielding: ownEventLoops?.yielding,
            tls: listenerTLS,
            protocols: configuration.listenProtocols,
            drainTimeout: .seconds(10)
        )
        let publicListener = ListenerService(
            role: .public,
            address: configuration.listen,
            eventLoopGroup: group,
            limiter: limiter,
            drainDeadline: drainDeadline,
            logger: logger
        ) { channel in
            channel.pipeline.eventLoop.makeCompletedFuture {
                guard try limiter.admit(channel) else { return }
                try connections.configure(channel)
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
                logger: logger,
                scheduler: tuning.warmUpScheduler
            )
        )
        let router = AdminEndpoints.router(
            runtime: runtime,
            prefetcher: prefetcher,
            readiness: { warmUps.readiness },
            // The admin listener drains after the public one: meanwhile, /ready takes the proxy out of rotation.
            isDraining: { publicListener.listening.reported != nil && !publicListener.isAcceptingConnections }
        )
        // `/health` and `/ready` reveal nothing; an orchestrator's probes carry no token (`admin.probesOpen`).
        let adminAuthorization = adminAuthorization.openingProbes(configuration.adminProbesOpen)
        let adminLimiter = ConnectionLimiter(
            maximum: tuning.maximumAdminConnections,
            refusal: "too many open admin connections"
        )
        let adminListener = ListenerService(
            role: .admin,
            address: configuration.admin,
            eventLoopGroup: group,
            limiter: adminLimiter,
            drainDeadline: drainDeadline,
            logger: logger
        ) {
            [
                connections = AdminConnectionPipeline(
                    runtime: runtime,
                    router: router,
                    authorization: adminAuthorization,
                    firstRequestTimeout: tuning.adminFirstRequestTimeout,
                    logger: logger
                )
            ] channel in
            channel.pipeline.eventLoop.makeCompletedFuture {
                guard try adminLimiter.admit(channel) else { return }
                try connections.configure(channel)
            }
        }
        fleetPrefetcher.prefetcher = prefetcher
        // First, so they stop last: the spans of requests that end while the others drain are still sent, and
        // invalidations made meanwhile still reach the fleet.
        var services: [any Service] = (spanExporter.map { [$0] } ?? []) + (fleetLog.map { [$0] } ?? [])
        if let writeQueue {
            var webhook = QueueResponseHandlers.WebhookPolicy()
            if writeQueue.store.isShared {
                // Looking again renews this replica's leases on the notifications it is sending.
                webhook.rescanInterval = min(
                    webhook.rescanInterval,
                    QueueClaimRules.renewalInterval(leaseTimeout: writeQueue.configuration.leaseTimeout)
                )
            }
            let handlers = QueueResponseHandlers(
                handlers: writeQueue.configuration.handlers,
                invalidate: QueueResponseHandlers.invalidation(through: context.invalidator),
                eventLoopGroup: group,
                webhook: webhook,
                store: writeQueue.store,
                logger: logger
            )
            services.append(
                QueueDeliveryService(
                    queue: writeQueue,
                    client: CurrentNetworkClient(runtime: runtime),
                    handlers: handlers,
                    eventLoopGroup: group,
                    logger: logger,
                    metrics: context.metrics
                )
            )
        }
        services.append(PrefetchService(prefetcher: prefetcher))
        services.append(
            WarmUpService(warmUps: warmUps) {
                _ = try await publicListener.listening.value
                _ = try await adminListener.listening.value
            }
        )
        // The certificate and key are read again on a timer, whatever else a reload does.
        if let listenerTLS { services.append(listenerTLS.service) }
        services.append(adminListener)
        services.append(publicListener)
        return ProxyServer(
            runtime: runtime,
            eventLoopGroup: group,
            ownEventLoops: ownEventLoops,
            threadPool: threadPool,
            services: services,
            publicListener: publicListener,
            adminListener: adminListener,
            prefetcher: prefetcher,
            warmUps: warmUps,
            warmUpScheduler: tuning.warmUpScheduler,
            drainDeadline: drainDeadline,
            connectionLimiter: limiter,
            listenerTLS: listenerTLS
        )
    }

    /// Returns once both listeners accept connections; throws why one could not.
    func listening() async throws {
        _ = try await publicListener.listening.value
        _ = try await adminListener.listening.value
    }

    /// Logs where the proxy listens, once it does, then reports ``announced``.
    private func announce() async {
        do {
            try await listening()
        } catch {
            announced.fail(error)
            return
        }
        defer { announced.succeed(()) }
        let configuration = context.configuration
        context.logger.info(
            "listening",
            metadata: [
                "version": "\(SDUIProxyVersion.current)",
                "public": "\(configuration.listen.host):\(publicPort)",
                "admin": "\(configuration.admin.host):\(adminPort)",
                "upstream": "\(configuration.upstream.url)",
                "eventLoops": "\(eventLoopGroup.makeIterator().reduce(0) { count, _ in count + 1 })",
                "yieldAfter": "\(ownEventLoops?.yieldAfterDescription ?? "n/a (the caller's event loops)")",
            ]
        )
    }

    /// Runs the proxy's services in one `ServiceGroup` until it shuts down (a signal among
    /// `gracefulShutdownSignals`, ``shutdown(drainTimeout:)``, or a service that fails), then releases what the
    /// server made itself. Throws the error of a service that failed. Runs once.
    ///
    /// - Parameters:
    ///   - additionalServices: run after the proxy's own, so shut down before them (the reload on SIGHUP).
    ///   - drainTimeout: how long the listeners drain; ``shutdown(drainTimeout:)`` says it otherwise (10 s).
    func run(
        gracefulShutdownSignals: [UnixSignal] = [],
        additionalServices: [any Service] = [],
        drainTimeout: TimeAmount? = nil
    ) async throws {
        if let drainTimeout { drainDeadline.setTimeout(drainTimeout) }
        let logger = context.logger
        let serviceGroup = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: (services + additionalServices).map {
                    ServiceGroupConfiguration.ServiceConfiguration(service: $0)
                },
                gracefulShutdownSignals: gracefulShutdownSignals,
                logger: logger
            )
        )
        let shutdownRequested = group.withLock { state in
            state.group = serviceGroup
            return state.shutdownRequested
        }
        if shutdownRequested { await serviceGroup.triggerGracefulShutdown() }
        let outcome: Result<Void, any Error>
        do {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { await self.announce() }
                tasks.addTask { try await serviceGroup.run() }
                try await tasks.waitForAll()
            }
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        _ = shutdownBegan.exchange(true, ordering: .relaxed)
        await release()
        stopped.succeed(())
        try outcome.get()
    }

    /// Releases, once the services have stopped, what the server made itself: the write queue's store, the
    /// upstream clients, the thread pool, the event loops.
    private func release() async {
        let context = runtime.context
        try? await context.writeQueue?.close()
        try? await context.client.shutdown()
        for retiring in retiringClients.withLock({ Array($0.tasks.values) }) {
            retiring.cancel()
            await retiring.value
        }
        try? await threadPool.shutdownGracefully()
        try? await context.fetcher.compressionPool?.shutdownGracefully()
        try? await ownEventLoops?.group.shutdownGracefully()
        // A proxy that never listened did not run: its start-up error is all there is to say (the caller says it).
        if announced.reported != nil { context.logger.info("stopped") }
    }

    /// Shuts the services down in reverse order: the listeners stop accepting and let in-flight requests finish
    /// for up to `drainTimeout`, then close any connection still open; the warm-up and the prefetcher stop;
    /// queue delivery finishes the deliveries in flight. Then the upstream client, threads and loops are released.
    ///
    /// A second call returns at once.
    public func shutdown(drainTimeout: TimeAmount = .seconds(10)) async {
        guard shutdownBegan.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else {
            return
        }
        drainDeadline.setTimeout(drainTimeout)
        let serviceGroup = group.withLock { state in
            state.shutdownRequested = true
            return state.group
        }
        await serviceGroup?.triggerGracefulShutdown()
        try? await stopped.value
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
            ("listen.tls, listen.http2", configuration.listenProtocols != old.configuration.listenProtocols),
            ("admin", configuration.admin != old.configuration.admin),
            ("admin.probesOpen", configuration.adminProbesOpen != old.configuration.adminProbesOpen),
            ("cache.maxBytes", configuration.cache.maxBytes != old.configuration.cache.maxBytes),
            ("cache.maxEntries", configuration.cache.maxEntries != old.configuration.cache.maxEntries),
            ("queue", configuration.queue != old.configuration.queue),
            ("eventLoops", configuration.eventLoops != old.configuration.eventLoops),
            ("tracing", configuration.tracing != old.configuration.tracing),
        ] where changed {
            logger.warning("config reload: \(name) only changes on restart; keeping the running value")
        }
        configuration.listen = old.configuration.listen
        configuration.listenProtocols = old.configuration.listenProtocols
        configuration.admin = old.configuration.admin
        configuration.adminProbesOpen = old.configuration.adminProbesOpen
        configuration.cache.maxBytes = old.configuration.cache.maxBytes
        configuration.cache.maxEntries = old.configuration.cache.maxEntries
        configuration.queue = old.configuration.queue
        configuration.eventLoops = old.configuration.eventLoops
        configuration.tracing = old.configuration.tracing

        // A CA file rotated in place changes the upstream too: the client is made again when the file's bytes differ
        // from those it trusts (or cannot be read, which the checks then report).
        var upstreamChanged = configuration.upstream != old.configuration.upstream
        if !upstreamChanged, let caFile = configuration.upstream.caFile {
            upstreamChanged = (try? UpstreamTLS.read(caFile)) != (old.client as? LoopLocalHTTPClient)?.authorityFile
        }
        if upstreamChanged { try StartupChecks.checkUpstream(configuration.upstream) }
        // The same certificate and key paths, read again (a rotated pair); one that fails is logged, and the pair in
        // force stays. Changed paths are the restart's, as above.
        listenerTLS?.reload()
        let context = try ProxyContext.build(
            configuration: configuration,
            cache: old.cache,
            coalescer: old.fetcher.coalescer,
            // Kept when its limit stays, so the fills in flight across the reload count against one budget.
            bufferBudget: old.fetcher.bufferBudget,
            client: upstreamChanged ? nil : old.client,
            writeQueue: old.writeQueue,
            metrics: old.metrics,
            invalidator: old.invalidator,
            eventLoopGroup: eventLoopGroup,
            threadPool: threadPool,
            compressionPool: old.fetcher.compressionPool,
            tracer: old.tracer,
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
                logger: logger,
                scheduler: warmUpScheduler
            )
            warmUps.replace(with: warmUp)
        }
    }
}
