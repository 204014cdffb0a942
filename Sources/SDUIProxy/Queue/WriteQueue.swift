import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Synchronization

/// The durable write queue as the request handler and the admin listener see it (Lucid's `APIClientQueue`,
/// server side).
///
/// The handler forwards a request on a queued route (``route(for:path:)``) at once; when the backend cannot
/// take it (unreachable, reset, timeout, or a status in `queue.retryableStatuses`) it calls ``enqueue(_:)``
/// and answers the client `202 Accepted` with the ``QueueReceipt``. A ``QueueDeliveryService`` delivers what
/// is queued.
public final class WriteQueue: Sendable {
    /// The `queue` section it runs with.
    public let configuration: QueueConfiguration
    /// Where the requests are kept.
    public let store: any QueueStore
    /// The path a receipt's status location starts with (`/.sdui/queue/`, on the public listener); the id
    /// follows.
    public let statusPathPrefix: String
    let logger: Logger

    /// Pending requests, counted here so the depth bound and the metric cost no store query.
    private let pendingCount: Atomic<Int>
    /// One per sequential route key, waited on by that route's worker.
    let routeSignals: [String: WakeSignal]
    /// Waited on by the dispatcher of all concurrent routes.
    let concurrentSignal = WakeSignal()
    /// Per sequential route key: its requests pending in the store, and the last write admitted on it, which
    /// the next one waits for (``admitWrite(on:eventLoop:_:)``).
    private let sequentialLanes: Mutex<[String: SequentialLane]>
    /// The local identifiers of creates, pending or recently finished: a write is checked against them by a hash
    /// lookup per token it names (``identifierPlan(for:route:)``). Empty, and unused, when no route has `creates`.
    let identifiers: Mutex<LocalIdentifierLedger>
    /// Whether some route has `creates`: writes are only looked at for local identifiers then.
    let tracksIdentifiers: Bool
    /// Writes given backend identifiers in place of local ones, and writes ended `dependencyFailed`, since start.
    let identifierMerges = Atomic(0)
    let dependencyFailures = Atomic(0)

    private struct SequentialLane {
        var pending = 0
        var lastAdmitted: EventLoopFuture<Void>?
    }

    /// Uses `store`, whose pending entries count towards the depth.
    public init(
        configuration: QueueConfiguration,
        store: any QueueStore,
        statusPathPrefix: String = RequestRouter.queueStatusPrefix,
        logger: Logger = Logger(label: "sdui-proxy.queue")
    ) async throws {
        self.configuration = configuration
        self.store = store
        self.statusPathPrefix = statusPathPrefix
        self.logger = logger
        // A shared store that cannot be reached yet does not stop the replica: its count is read again later
        // (``refreshPendingCount()``). Its sequential routes' writes are always queued, so their lanes' counts go
        // unused.
        let depths = store.isShared ? (try? await store.depths()) ?? [] : try await store.depths()
        self.pendingCount = Atomic(depths.reduce(0) { $0 + $1.depth })
        var signals: [String: WakeSignal] = [:]
        var lanes: [String: SequentialLane] = [:]
        for route in configuration.routes where route.ordering == .sequential {
            signals[route.key] = WakeSignal()
            lanes[route.key] = SequentialLane()
        }
        for depth in depths where lanes[depth.route] != nil {
            lanes[depth.route]?.pending = depth.depth
        }
        self.routeSignals = signals
        self.sequentialLanes = Mutex(lanes)
        let ledger = try await Self.loadIdentifiers(configuration: configuration, store: store, logger: logger)
        self.tracksIdentifiers = ledger != nil
        self.identifiers = Mutex(ledger ?? LocalIdentifierLedger(retention: configuration.retention))
    }

    /// Opens the store `configuration.store` names, and the queue over it: a SQLite file of this replica's own, or
    /// a PostgreSQL database the fleet shares.
    ///
    /// - Parameters:
    ///   - threadPool: where a SQLite store's blocking calls run: the proxy's own pool, stopped after the queue is
    ///     closed.
    ///   - eventLoop: where a SQLite store's futures complete: one of the proxy's own loops.
    ///   - replicaName: who holds this process's leases in a shared store.
    ///   - claimMetrics: a shared store's claims and lease expiries.
    public static func open(
        configuration: QueueConfiguration,
        threadPool: NIOThreadPool,
        eventLoop: any EventLoop,
        replicaName: String = "sdui-proxy",
        claimMetrics: QueueClaimMetrics? = nil,
        statusPathPrefix: String = RequestRouter.queueStatusPrefix,
        logger: Logger = Logger(label: "sdui-proxy.queue")
    ) async throws -> WriteQueue {
        let store: any QueueStore
        switch try configuration.storeLocation {
        case .sqlite(let directory):
            store = try await SQLiteQueueStore.open(
                directory: directory,
                threadPool: threadPool,
                eventLoop: eventLoop,
                logger: logger
            )
        case .postgres(let url):
            var settings = PostgresQueueStore.Settings(
                owner: QueueClaimRules.owner(replicaName: replicaName),
                leaseTimeout: configuration.leaseTimeout,
                cleanupInterval: configuration.cleanupInterval
            )
            settings.concurrentRoutes = Set(configuration.routes.filter { $0.ordering == .concurrent }.map(\.key))
            store = await PostgresQueueStore.open(
                url: url,
                replicaName: replicaName,
                settings: settings,
                metrics: claimMetrics,
                logger: logger
            )
        }
        do {
            return try await WriteQueue(
                configuration: configuration,
                store: store,
                statusPathPrefix: statusPathPrefix,
                logger: logger
            )
        } catch {
            try? await store.close()
            throw error
        }
    }

    /// Closes the store; call after the ``QueueDeliveryService`` has returned.
    public func close() async throws {
        try await store.close()
    }

    // MARK: Request path

    /// The queued route for a request, or nil when requests like it are forwarded as usual.
    public func route(for method: HTTPMethod, path: String) -> QueueConfiguration.Route? {
        configuration.route(method: method.rawValue, path: path)
    }

    /// The largest body ``enqueue(_:)`` takes: the handler buffers up to this much of a queued route's body.
    public var maxBodyBytes: Int { configuration.maxBodyBytes }

    /// Requests waiting for delivery, for metrics.
    public var depth: Int { pendingCount.load(ordering: .relaxed) }

    /// Runs `write` for a request on `route` and returns its response.
    ///
    /// On a sequential route one request at a time decides between the backend and the queue, in the order
    /// they arrived, and `write` is told to queue when the route has requests waiting in the store (sent
    /// straight to a backend that is back, it would overtake them), or when the store is shared by a fleet. (Decided one at a time, a request that
    /// waits for a slow backend and then queues still comes before the next one.) On a concurrent route
    /// `write` runs at once and is never told to queue.
    ///
    /// - Parameter write: sends the request to the backend, or queues it when its argument is true; it must
    ///   complete (the backend's timeout bounds it), or the route's later writes wait for ever.
    func admitWrite<Answer: Sendable>(
        on route: QueueConfiguration.Route,
        eventLoop: any EventLoop,
        _ write: @escaping @Sendable (_ queueBehindBacklog: Bool) -> EventLoopFuture<Answer>
    ) -> EventLoopFuture<Answer> {
        guard route.ordering == .sequential else { return write(false) }
        let admitted = eventLoop.makePromise(of: Void.self)
        let previous = sequentialLanes.withLock { lanes in
            defer { lanes[route.key, default: SequentialLane()].lastAdmitted = admitted.futureResult }
            return lanes[route.key]?.lastAdmitted
        }
        let turn = previous.map { $0.hop(to: eventLoop) } ?? eventLoop.makeSucceededVoidFuture()
        let response = turn.flatMap { write(self.mustQueue(route: route.key)) }
        response.whenComplete { _ in
            self.sequentialLanes.withLock { lanes in
                if lanes[route.key]?.lastAdmitted === admitted.futureResult { lanes[route.key]?.lastAdmitted = nil }
            }
            admitted.succeed()
        }
        return response
    }

    /// Whether a write on the sequential route `key` must be queued rather than forwarded: when requests wait in
    /// the store, so it does not overtake them; and always with a shared store, where only the database can keep
    /// one request of the route in flight across the fleet (a write forwarded at once by one replica could
    /// overtake, or run beside, one another replica queued or is delivering).
    private func mustQueue(route key: String) -> Bool {
        store.isShared || sequentialLanes.withLock { ($0[key]?.pending ?? 0) > 0 }
    }

    /// Stores `request` durably for later delivery; when this returns it survives a crash.
    ///
    /// - Throws: ``ProxyError`` `tooLarge` (413) when the body exceeds `queue.maxBodyBytes`, `unavailable` (503)
    ///   when `queue.maxDepth` requests are waiting or the store cannot write (an id already used included),
    ///   `internalError` when no queued route matches or the given id is not a token. Nothing is dropped silently.
    public func enqueue(_ request: QueuedRequest) async throws(ProxyError) -> QueueReceipt {
        guard let route = route(for: request.method, path: request.path) else {
            throw ProxyError(.internalError, "\(request.method.rawValue) \(request.path) is not on a queued route")
        }
        if let id = request.id, id.utf8.count > 128 || !HTTPSyntax.isToken(id) {
            throw ProxyError(
                .internalError,
                "\"\(id)\" cannot be a queue id (a header token of at most 128 characters)"
            )
        }
        let bodyBytes = request.body?.readableBytes ?? 0
        guard bodyBytes <= configuration.maxBodyBytes else {
            let limit = configuration.maxBodyBytes
            throw ProxyError(
                .tooLarge,
                "the request body (\(bodyBytes) bytes) is over the queue's limit (\(limit) bytes)"
            )
        }
        guard reserveSlot() else {
            throw ProxyError(.unavailable, "the write queue is full (\(configuration.maxDepth) requests waiting)")
        }

        let now = QueueInstant.now()
        let id = request.id ?? Self.newID()
        if let local = request.localId, case .conflict(let existing) = pendingCreate(of: local) {
            releaseSlot()
            throw Self.conflict(local, existing: existing)
        }
        // A request whose immediate forward failed waits one backoff before its first delivery.
        let firstAttempt =
            request.failure == nil
            ? now : now.advanced(by: route.retry.delay(afterAttempts: 1, unitRandom: .random(in: 0...1)))
        let entry = QueueEntry(
            id: id,
            route: route.key,
            method: request.method,
            target: request.target,
            headers: request.headers,
            body: request.body,
            enqueuedAt: now,
            nextAttemptAt: firstAttempt,
            lastError: request.failure,
            localId: request.localId
        )
        let dependsOn: [String]
        do {
            dependsOn = try await store.insert(entry, naming: request.names)
        } catch let conflict as LocalIdentifierConflict {
            releaseSlot()
            throw Self.conflict(conflict.local, existing: nil)
        } catch {
            releaseSlot()
            logger.error("cannot store a queued request", metadata: ["route": "\(route.key)", "error": "\(error)"])
            throw ProxyError(.unavailable, "the write queue cannot store the request", detail: "\(error)")
        }
        sequentialLanes.withLock { $0[route.key]?.pending += 1 }
        if let local = request.localId { createAccepted(local, create: id) }
        logger.debug("queued", metadata: ["id": "\(id)", "route": "\(route.key)", "target": "\(request.target)"])
        signal(route: route)
        return QueueReceipt(id: id, route: route.key, location: statusPathPrefix + id, waitsFor: dependsOn)
    }

    // MARK: Admin

    /// The body of `GET /queue`: total depth, and per route its ordering, depth and oldest age.
    public func overview() async -> AdminResponse {
        let depths: [QueueRouteDepth]
        do {
            depths = try await store.depths()
        } catch {
            return AdminResponse(ProxyError(.internalError, "cannot read the write queue: \(error)"))
        }
        let now = QueueInstant.now()
        let byRoute = Dictionary(depths.map { ($0.route, $0) }, uniquingKeysWith: { first, _ in first })
        var keys = configuration.routes.map(\.key)
        keys += depths.map(\.route).filter { key in !configuration.routes.contains { $0.key == key } }
        let routes = keys.map { key -> String in
            let depth = byRoute[key]
            let ordering = configuration.routes.first { $0.key == key }?.ordering.rawValue
            var fields = [
                #""route":\#(JSONText.quoted(key))"#,
                #""ordering":\#(ordering.map { "\"\($0)\"" } ?? "null")"#,
                #""depth":\#(depth?.depth ?? 0)"#,
            ]
            if let oldest = depth?.oldestEnqueuedAt {
                let age = max(0, now.millisecondsSinceEpoch - oldest.millisecondsSinceEpoch)
                fields.append(#""oldestEnqueuedAt":"\#(oldest)""#)
                fields.append(#""oldestAgeSeconds":\#(Double(age) / 1000)"#)
            } else {
                fields.append(#""oldestAgeSeconds":null"#)
            }
            return "{" + fields.joined(separator: ",") + "}"
        }
        let total = depths.reduce(0) { $0 + $1.depth }
        let list = routes.joined(separator: ",")
        return AdminResponse(json: #"{"depth":\#(total),"maxDepth":\#(configuration.maxDepth),"routes":[\#(list)]}"#)
    }

    /// The body of `GET /queue/ID`: the request's state (`pending`, `delivered` with the backend's status,
    /// `failed` with the last error and the attempts); 404 with a JSON error for an unknown id.
    public func status(id: String) async -> AdminResponse {
        let status: QueueEntryStatus?
        do {
            status = try await store.status(id: id)
        } catch {
            return AdminResponse(ProxyError(.internalError, "cannot read the write queue: \(error)"))
        }
        guard let status else { return AdminResponse(ProxyError(.notFound, "no queued request has the id \(id)")) }
        return AdminResponse(json: status.json)
    }

    // MARK: Delivery side

    /// Called by the delivery service when a request on `route` (its key) reached a final outcome.
    func didFinish(route: String) {
        pendingCount.subtract(1, ordering: .relaxed)
        sequentialLanes.withLock { $0[route]?.pending -= 1 }
    }

    /// Reads the number of pending requests from the store again: in a shared store other replicas add and
    /// deliver them, so the count kept here (the depth metric and the `maxDepth` bound) drifts between reads.
    func refreshPendingCount() async throws {
        pendingCount.store(try await store.pendingCount(), ordering: .relaxed)
    }

    func signal(route: QueueConfiguration.Route) {
        if route.ordering == .concurrent {
            concurrentSignal.signal()
        } else {
            routeSignals[route.key]?.signal()
        }
    }

    func signalAll() {
        concurrentSignal.signal()
        for signal in routeSignals.values { signal.signal() }
    }

    private func reserveSlot() -> Bool {
        var current = pendingCount.load(ordering: .relaxed)
        while current < configuration.maxDepth {
            let (exchanged, original) = pendingCount.compareExchange(
                expected: current,
                desired: current + 1,
                ordering: .relaxed
            )
            if exchanged { return true }
            current = original
        }
        return false
    }

    private func releaseSlot() {
        pendingCount.subtract(1, ordering: .relaxed)
    }

    /// Whether `text` is a queue id as ``newID()`` makes them: 32 lower-case hex digits.
    public static func isQueueID(_ text: String) -> Bool {
        let digits = UInt8(ascii: "0")...UInt8(ascii: "9")
        let letters = UInt8(ascii: "a")...UInt8(ascii: "f")
        return text.utf8.count == 32 && text.utf8.allSatisfy { digits.contains($0) || letters.contains($0) }
    }

    /// A new queue id: 128 random bits as 32 lower-case hex digits. ``enqueue(_:)`` makes one when the request
    /// brings none; make one beforehand to send it as `Idempotency-Key` with the immediate forward.
    ///
    /// The bits come from the system's secure generator (``SecureRandomID``): the id is all a client needs to read
    /// its write's status on the public listener (``RequestRouter/queueStatusPrefix``), so it must not be guessed.
    public static func newID() -> String {
        SecureRandomID.make()
    }
}
