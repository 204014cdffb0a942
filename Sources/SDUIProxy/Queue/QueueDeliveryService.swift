import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import ServiceLifecycle
import Synchronization

/// Delivers what the ``WriteQueue`` holds, as a swift-service-lifecycle `Service`.
///
/// - A `sequential` route has one worker that sends its requests one at a time in arrival order: a request
///   is sent only after the one ahead of it was delivered or finally failed (head-of-line, backoff included).
/// - All `concurrent` routes share one dispatcher that runs up to `queue.concurrency` deliveries at once.
/// - A worker wakes when something is enqueued on its route, when a backoff ends, and every
///   `pollInterval` as a safety net.
/// - Each delivery carries the client's one `Idempotency-Key`, else `Idempotency-Key: <queue id>`. 2xx and 3xx
///   deliver; network errors, timeouts and `queue.retryableStatuses` are retried with the route's backoff
///   (with jitter) until `maxAttempts` or `maxAge` run out; any other status fails at once. Final outcomes go
///   to the ``QueueResponseHandlers``.
/// - Pending requests found at start (after a restart or a crash) are delivered first, in order; requests on
///   routes no longer configured are delivered with the default retry policy, in order.
/// - On graceful shutdown no new delivery starts; those in flight finish and are recorded (or, if the process
///   dies first, stay pending and are sent again with the same idempotency key). Nothing is marked delivered
///   without a 2xx or 3xx answer.
///
/// Run one delivery service per process: with a SQLite store that is one per store; a PostgreSQL store is shared by
/// the services of every replica, which claim what they deliver from it.
public final class QueueDeliveryService: Service, Sendable {
    /// The queue whose requests this service delivers.
    public let queue: WriteQueue
    private let client: any NetworkClient
    let handlers: QueueResponseHandlers?
    private let eventLoopGroup: any EventLoopGroup
    private let pollInterval: Duration
    private let storeRetryDelay: Duration
    let logger: Logger
    /// Counts each failed delivery in `sdui_upstream_errors_total`, as failed cache fills are.
    private let metrics: ProxyMetrics?

    /// - Parameters:
    ///   - client: sends deliveries to the backend (the proxy's upstream client).
    ///   - handlers: run on final outcomes; this service runs them and finishes them when it stops.
    ///   - pollInterval: how often the store is looked at without any wake-up.
    ///   - storeRetryDelay: the wait after the store failed.
    ///   - metrics: where each delivery that fails to reach the backend is counted; nil counts nothing.
    public init(
        queue: WriteQueue,
        client: any NetworkClient,
        handlers: QueueResponseHandlers? = nil,
        eventLoopGroup: any EventLoopGroup,
        pollInterval: Duration = .seconds(5),
        storeRetryDelay: Duration = .seconds(1),
        logger: Logger = Logger(label: "sdui-proxy.queue.delivery"),
        metrics: ProxyMetrics? = nil
    ) {
        self.queue = queue
        self.client = client
        self.handlers = handlers
        self.eventLoopGroup = eventLoopGroup
        self.pollInterval = pollInterval
        self.storeRetryDelay = storeRetryDelay
        self.logger = logger
        self.metrics = metrics
    }

    /// Delivers until graceful shutdown or cancellation, then waits for deliveries in flight and handlers.
    public func run() async throws {
        let run = RunState()
        // Read before any delivery ends, so that an outcome of this run is not among them.
        let unnotified = await handlers?.unnotifiedOutcomes() ?? []
        await withTaskGroup(of: Void.self) { outer in
            if let handlers {
                outer.addTask { await handlers.run(replaying: unnotified) }
            }
            await withGracefulShutdownHandler {
                await self.deliver(until: run)
            } onGracefulShutdown: {
                run.stop()
                self.queue.signalAll()
            }
            handlers?.finish()
            await outer.waitForAll()
        }
    }

    // MARK: Workers

    /// What one run shares between its workers.
    private final class RunState: Sendable {
        private let stopped = Atomic(false)
        /// Signals of workers for routes that are not configured any more.
        let orphanSignals = Mutex<[WakeSignal]>([])

        var isStopping: Bool { stopped.load(ordering: .relaxed) || Task.isCancelled }

        func stop() {
            stopped.store(true, ordering: .relaxed)
            for signal in orphanSignals.withLock({ $0 }) { signal.signal() }
        }
    }

    /// The ids of deliveries in flight on concurrent routes.
    private final class InFlightSet: Sendable {
        let ids = Mutex<Set<String>>([])
    }

    private func deliver(until run: RunState) async {
        let configuration = queue.configuration
        var orphans: [QueueConfiguration.Route] = []
        do {
            for depth in try await queue.store.depths()
            where !configuration.routes.contains(where: { $0.key == depth.route }) {
                orphans.append(Self.fallbackRoute(key: depth.route))
            }
        } catch {
            logger.error(
                "cannot read the write queue; delivering configured routes only",
                metadata: ["error": "\(error)"]
            )
        }
        if queue.store.isShared, !orphans.isEmpty {
            // Another replica may have the route, with its own ordering and retry policy (a rolling deploy): it
            // delivers them. Delivered here under a guessed policy, they could go out of order or fail early.
            for orphan in orphans {
                logger.warning(
                    "the shared queue holds requests on a route this replica does not have: left to the replicas that do",
                    metadata: ["route": "\(orphan.key)"]
                )
            }
            orphans = []
        }
        for orphan in orphans {
            logger.warning(
                "delivering requests queued on a route that is not configured any more",
                metadata: ["route": "\(orphan.key)"]
            )
        }
        await withDiscardingTaskGroup { group in
            for route in configuration.routes where route.ordering == .sequential {
                guard let signal = queue.routeSignals[route.key] else { continue }
                group.addTask { await self.runSequential(route, signal: signal, untilEmpty: false, run: run) }
            }
            for route in orphans {
                let signal = WakeSignal()
                run.orphanSignals.withLock { $0.append(signal) }
                group.addTask { await self.runSequential(route, signal: signal, untilEmpty: true, run: run) }
            }
            let concurrent = configuration.routes.filter { $0.ordering == .concurrent }
            if !concurrent.isEmpty {
                group.addTask { await self.runConcurrent(concurrent, run: run) }
            }
            group.addTask { await self.removeFinished(run: run) }
            if queue.store.isShared {
                group.addTask { await self.refreshPendingCount(run: run) }
            }
        }
    }

    /// Reads the shared store's pending count every `pollInterval`: other replicas queue and deliver there too.
    private func refreshPendingCount(run: RunState) async {
        let signal = WakeSignal()
        run.orphanSignals.withLock { $0.append(signal) }
        while !run.isStopping {
            do {
                try await queue.refreshPendingCount()
            } catch {
                logger.debug("cannot read the shared write queue's depth", metadata: ["error": "\(error)"])
            }
            await signal.wait(upTo: pollInterval)
        }
    }

    /// Sends the requests of a sequential route one at a time, in arrival order.
    ///
    /// The store hands out only the route's head, and only to one deliverer at a time: with a shared store the
    /// order holds across the fleet, whichever replica delivers.
    private func runSequential(
        _ route: QueueConfiguration.Route,
        signal: WakeSignal,
        untilEmpty: Bool,
        run: RunState
    ) async {
        while !run.isStopping {
            let claim: QueueHeadClaim
            do {
                claim = try await queue.store.claimHead(route: route.key, at: .now())
            } catch {
                logger.error("cannot read the write queue", metadata: ["route": "\(route.key)", "error": "\(error)"])
                await signal.wait(upTo: storeRetryDelay)
                continue
            }
            switch claim {
            case .empty:
                if untilEmpty { return }
                await signal.wait(upTo: pollInterval)
            case .waitingForCreates:
                // A create's outcome on this process signals every route; one on another replica is seen by polling.
                await signal.wait(upTo: pollInterval)
            case .notBefore(let time):
                await signal.wait(upTo: min(pollInterval, max(.milliseconds(1), time.duration(since: .now()))))
            case .claimed(let head):
                if run.isStopping {
                    try? await queue.store.releaseClaims(ids: [head.id])
                    return
                }
                if !(await attempt(head, route: route, run: run)) {
                    await signal.wait(upTo: storeRetryDelay)
                }
            }
        }
    }

    /// Sends the requests of all concurrent routes, at most `queue.concurrency` at once.
    private func runConcurrent(_ routes: [QueueConfiguration.Route], run: RunState) async {
        let byKey = Dictionary(routes.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
        let keys = routes.map(\.key)
        let limit = queue.configuration.concurrency
        let signal = queue.concurrentSignal
        let inFlight = InFlightSet()
        await withDiscardingTaskGroup { group in
            while !run.isStopping {
                var wait = pollInterval
                let busy = inFlight.ids.withLock { $0 }
                do {
                    let free = limit - busy.count
                    if free > 0 {
                        let due = try await queue.store.claimDue(
                            routes: keys,
                            at: .now(),
                            excluding: busy,
                            limit: free
                        )
                        var launched = busy
                        var unlaunched: [String] = []
                        for entry in due {
                            guard let route = byKey[entry.route], !run.isStopping else {
                                unlaunched.append(entry.id)
                                continue
                            }
                            launched.insert(entry.id)
                            inFlight.ids.withLock { _ = $0.insert(entry.id) }
                            group.addTask {
                                let recorded = await self.attempt(entry, route: route, run: run)
                                if !recorded { try? await Task.sleep(for: self.storeRetryDelay) }
                                inFlight.ids.withLock { _ = $0.remove(entry.id) }
                                signal.signal()
                            }
                        }
                        if !unlaunched.isEmpty { try await queue.store.releaseClaims(ids: unlaunched) }
                        // Below the limit: sleep until the next backoff ends (a finishing delivery wakes us too).
                        if due.count < free,
                            let next = try await queue.store.earliestAttempt(routes: keys, excluding: launched)
                        {
                            wait = min(wait, next.duration(since: .now()))
                        }
                    }
                } catch {
                    logger.error("cannot read the write queue", metadata: ["error": "\(error)"])
                    wait = storeRetryDelay
                }
                await signal.wait(upTo: wait)
            }
        }
    }

    /// Forgets finished requests older than `queue.retention`, at start and then every minute or so.
    private func removeFinished(run: RunState) async {
        let signal = WakeSignal()
        run.orphanSignals.withLock { $0.append(signal) }
        let retention = queue.configuration.retention
        let interval = queue.configuration.cleanupInterval
        while !run.isStopping {
            do {
                queue.expireIdentifiers()
                let removed = try await queue.store.removeFinished(
                    before: QueueInstant.now().advanced(by: .zero - retention)
                )
                if removed > 0 { logger.debug("forgot finished queued requests", metadata: ["count": "\(removed)"]) }
            } catch {
                logger.error("cannot clean up the write queue", metadata: ["error": "\(error)"])
            }
            await signal.wait(upTo: interval)
        }
    }

    // MARK: One attempt

    /// Makes one attempt of `entry` (or gives it up when too old) and records the result; false when the
    /// store could not record it (the entry stays pending).
    private func attempt(_ claimed: QueueEntry, route: QueueConfiguration.Route, run: RunState) async -> Bool {
        var entry = claimed
        if !entry.dependsOn.isEmpty {
            // Never sent with a local identifier: merged first (and stored merged), or ended `dependencyFailed`.
            switch await mergeIdentifiers(into: entry) {
            case .send(let merged): entry = merged
            case .settled: return true
            case .storeFailed: return false
            }
        }
        let rules = DeliveryRules(retry: route.retry, retryableStatuses: queue.configuration.retryableStatuses)
        if let decision = rules.beforeAttempt(
            enqueuedAt: entry.enqueuedAt,
            lastError: entry.lastError,
            lastStatus: entry.lastStatus,
            now: .now()
        ) {
            return await record(decision, for: entry, attempts: entry.attempts)
        }
        let attempts = entry.attempts + 1
        // A create's answer names the backend's identifier: its head and the start of its body are kept.
        let answer = DeliveryAnswerSink(
            eventLoop: eventLoopGroup.next(),
            keepingBodyBytes: route.creates == nil ? 0 : DeliveryAnswerSink.identifierBodyBytes
        )
        let sent = entry
        let outcome = await whileClaimed(entry) {
            do {
                return .response(status: Int(try await self.send(sent.upstreamRequest, to: answer).code))
            } catch let error as ProxyError {
                return .error(error)
            } catch {
                return .error(ProxyError(.network, "the delivery failed: \(error)"))
            }
        }
        guard let result = outcome else { return true }
        // Every attempt that did not reach the backend, not only the first of an outage: each is a request the
        // backend failed.
        if case .error(let error) = result { metrics?.upstreamFailed(kind: error.kind) }
        let decision = rules.afterAttempt(
            result,
            attempts: attempts,
            enqueuedAt: entry.enqueuedAt,
            now: .now(),
            unitRandom: .random(in: 0...1)
        )
        // The backend has answered: record that, trying the store again (never the backend) until it takes it
        // or the service stops, so a request the backend has taken is not sent again while the store fails for
        // a while (a disk full, or remounted read-only). In an unstructured task, so that cancelling this one
        // does not cut the recording short; the cancellation stops the run, which ends the retries.
        let remoteId = route.creates.flatMap { rule -> RemoteIdentifier? in
            guard case .delivered = decision else { return nil }
            return answer.remoteIdentifier(by: rule)
        }
        let recording = Task { [entry] in
            while true {
                if await self.record(decision, for: entry, attempts: attempts, remoteId: remoteId) { return true }
                if run.isStopping { return false }
                try? await Task.sleep(for: self.storeRetryDelay)
            }
        }
        return await withTaskCancellationHandler {
            await recording.value
        } onCancel: {
            run.stop()
        }
    }

    /// Runs `delivery` while renewing the claim on `entry`, in a store shared with other replicas; nil when the
    /// claim was lost first (another replica took the entry over, or no renewal got through before the lease
    /// ran out). The delivery is then left to finish on its own, within `upstream.timeout` (which the lease
    /// outlasts), and its result is not recorded: the outcome is the new holder's to record.
    private func whileClaimed(
        _ entry: QueueEntry,
        _ delivery: @escaping @Sendable () async -> DeliveryRules.AttemptResult
    ) async -> DeliveryRules.AttemptResult? {
        guard queue.store.isShared else { return await delivery() }
        let leaseTimeout = queue.configuration.leaseTimeout
        let interval = QueueClaimRules.renewalInterval(leaseTimeout: leaseTimeout)
        return await withCheckedContinuation { continuation in
            let answer = FirstAnswer(continuation)
            let renewing = Task {
                var renewed = ContinuousClock.now
                while (try? await Task.sleep(for: interval)) != nil {
                    do {
                        if try await self.queue.store.renewClaim(id: entry.id) {
                            renewed = ContinuousClock.now
                            continue
                        }
                        self.logger.warning(
                            "lost the claim on a delivery in flight: another replica delivers it and records its outcome",
                            metadata: ["id": "\(entry.id)", "route": "\(entry.route)"]
                        )
                        return answer.give(nil)
                    } catch {
                        self.logger.error(
                            "cannot renew the claim on a delivery in flight",
                            metadata: ["id": "\(entry.id)", "error": "\(error)"]
                        )
                        if ContinuousClock.now - renewed >= leaseTimeout - interval { return answer.give(nil) }
                    }
                }
            }
            Task {
                let result = await delivery()
                renewing.cancel()
                answer.give(result)
            }
        }
    }

    /// Resumes a continuation with the first answer given; later ones are dropped.
    private final class FirstAnswer: Sendable {
        private let continuation: Mutex<CheckedContinuation<DeliveryRules.AttemptResult?, Never>?>

        init(_ continuation: CheckedContinuation<DeliveryRules.AttemptResult?, Never>) {
            self.continuation = Mutex(continuation)
        }

        func give(_ answer: DeliveryRules.AttemptResult?) {
            continuation.withLock { $0.take() }?.resume(returning: answer)
        }
    }

    /// Sends a delivery and reads the answer's status: all a delivery needs, but a create's identifier. The body
    /// is read past (a create's first bytes aside), so an answer of any size tells whether the backend took it.
    private func send(_ request: UpstreamRequest, to answer: DeliveryAnswerSink) async throws -> HTTPResponseStatus {
        let eventLoop = answer.eventLoop
        do {
            // The body is in memory: it goes with the request, and again if a stale connection refuses it.
            try await eventLoop.flatSubmit { [client] in
                client.forward(request, body: nil, on: eventLoop, to: answer)
            }.get()
        } catch {
            // A body cut short (a reset, the deadline) after the head came: the backend has answered, and sending
            // the write again would make it twice.
            guard let status = answer.status else { throw error }
            logger.debug("a delivery's answer was cut short after its head", metadata: ["error": "\(error)"])
            return status
        }
        guard let status = answer.status else { throw ProxyError(.network, "the backend's answer had no head") }
        return status
    }

    private func record(
        _ decision: DeliveryRules.Decision,
        for entry: QueueEntry,
        attempts: Int,
        remoteId: RemoteIdentifier? = nil
    ) async -> Bool {
        let metadata: Logger.Metadata = ["id": "\(entry.id)", "route": "\(entry.route)", "attempts": "\(attempts)"]
        do {
            switch decision {
            case .retry(let time, let error, let status):
                try await queue.store.recordAttempt(
                    id: entry.id,
                    attempts: attempts,
                    nextAttemptAt: time,
                    lastError: error,
                    status: status
                )
                logger.debug("delivery will be retried", metadata: metadata.merging(["error": "\(error)"]) { $1 })
            case .delivered(let status):
                let event = QueueOutcomeEvent(
                    id: entry.id,
                    route: entry.route,
                    outcome: .delivered,
                    status: status,
                    attempts: attempts,
                    localId: entry.localId?.value,
                    remoteId: remoteId?.text
                )
                let now = QueueInstant.now()
                if try await queue.store.markDelivered(
                    id: entry.id,
                    status: status,
                    attempts: attempts,
                    at: now,
                    awaitingNotification: handlers?.awaitsNotification(event) ?? false,
                    remoteId: remoteId
                ) {
                    queue.didFinish(route: entry.route)
                    logger.info("delivered", metadata: metadata.merging(["status": "\(status)"]) { $1 })
                    if let local = entry.localId {
                        createFinished(entry, local: local, state: .delivered(remoteId), at: now)
                    }
                    handlers?.submit(event)
                }
            case .failed(let error, let status):
                let event = QueueOutcomeEvent(
                    id: entry.id,
                    route: entry.route,
                    outcome: .failed,
                    status: status,
                    attempts: attempts,
                    error: error,
                    localId: entry.localId?.value
                )
                let now = QueueInstant.now()
                if try await queue.store.markFailed(
                    id: entry.id,
                    lastError: error,
                    status: status,
                    attempts: attempts,
                    at: now,
                    awaitingNotification: handlers?.awaitsNotification(event) ?? false
                ) {
                    queue.didFinish(route: entry.route)
                    logger.warning("delivery failed for good", metadata: metadata.merging(["error": "\(error)"]) { $1 })
                    if let local = entry.localId {
                        createFinished(entry, local: local, state: .failed(reason: error), at: now)
                    }
                    handlers?.submit(event)
                }
            }
            return true
        } catch {
            logger.error("cannot record a delivery outcome", metadata: metadata.merging(["error": "\(error)"]) { $1 })
            return false
        }
    }

    /// The route used for requests queued under a route that is no longer configured.
    static func fallbackRoute(key: String) -> QueueConfiguration.Route {
        let parts = key.split(separator: " ", maxSplits: 1)
        return QueueConfiguration.Route(
            method: parts.first.map(String.init) ?? "POST",
            pathPrefix: parts.count > 1 ? String(parts[1]) : "/",
            ordering: .sequential
        )
    }
}
