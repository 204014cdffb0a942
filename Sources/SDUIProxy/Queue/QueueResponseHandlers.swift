import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization

/// A queued request that reached its final outcome, as handlers and webhooks see it.
public struct QueueOutcomeEvent: Sendable, Equatable {
    /// The queue id.
    public var id: String
    /// The route key (`POST /api/orders`).
    public var route: String
    /// Delivered or failed.
    public var outcome: QueueConfiguration.Outcome
    /// The backend's status: the delivering answer, or the last one for a failed request (nil if none).
    public var status: Int?
    /// Delivery attempts made.
    public var attempts: Int
    /// Why it failed (nil when delivered).
    public var error: String?
    /// For a create: the client's local identifier, and the backend's when its answer named one.
    public var localId: String?
    public var remoteId: String?
    /// For a `dependencyFailed` write: the create (queue id) whose failure failed it.
    public var failedCreate: String?

    /// An event with the given fields.
    public init(
        id: String,
        route: String,
        outcome: QueueConfiguration.Outcome,
        status: Int?,
        attempts: Int,
        error: String? = nil,
        localId: String? = nil,
        remoteId: String? = nil,
        failedCreate: String? = nil
    ) {
        self.id = id
        self.route = route
        self.outcome = outcome
        self.status = status
        self.attempts = attempts
        self.error = error
        self.localId = localId
        self.remoteId = remoteId
        self.failedCreate = failedCreate
    }

    /// The webhook notification: `{"id", "route", "outcome", "status", "attempts"}`, plus `"error"` when failed,
    /// `"localId"` and `"remoteId"` for a create, `"failedCreate"` for a write whose create failed.
    public var json: String {
        var fields = [
            #""id":\#(JSONText.quoted(id))"#,
            #""route":\#(JSONText.quoted(route))"#,
            #""outcome":"\#(outcome.rawValue)""#,
            #""status":\#(status.map(String.init) ?? "null")"#,
            #""attempts":\#(attempts)"#,
        ]
        if let error { fields.append(#""error":\#(JSONText.quoted(error))"#) }
        if let localId {
            fields.append(#""localId":\#(JSONText.quoted(localId))"#)
            fields.append(#""remoteId":\#(remoteId.map(JSONText.quoted) ?? "null")"#)
        }
        if let failedCreate { fields.append(#""failedCreate":\#(JSONText.quoted(failedCreate))"#) }
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// Runs the `queue.handlers` (Lucid's response handlers) when queued requests reach their final outcome:
/// cache invalidations through an injected closure and webhook notifications over their own `HTTPClient`.
///
/// ``submit(_:)`` never waits: events go into a bounded buffer that ``run(replaying:)`` works through, so a slow
/// webhook never holds up delivery. Invalidations run as each event is taken; webhook notifications wait in a
/// queue of their own, so a slow or unreachable webhook never holds up an invalidation. Webhooks are retried
/// (network errors, 429 and 5xx) with backoff, a few notifications at a time. The ``QueueDeliveryService`` runs
/// this; ``run(replaying:)`` may be called once.
///
/// With a store, webhook notifications are durable: the store marks an outcome that a webhook must hear of in
/// the same change that records it, and the mark goes once every webhook took the notification, refused it (a
/// 4xx other than 429) or could not be reached in ``WebhookPolicy/maxAttempts`` tries (logged at error): a dead
/// webhook must not pile up notifications that every rescan sends again. One cut short by a shutdown or a
/// crash, or dropped from a full queue, stays marked: the store is looked at again every
/// ``WebhookPolicy/rescanInterval`` and at the next start (``unnotifiedOutcomes()``), and it is sent under the
/// same `Idempotency-Key`.
public final class QueueResponseHandlers: Sendable {
    /// How webhook notifications are sent.
    public struct WebhookPolicy: Sendable {
        /// Tries per notification, the first included.
        public var maxAttempts = 5
        /// The wait after the first failed try; it doubles after each further one.
        public var backoff: Duration = .milliseconds(200)
        /// The longest wait between two tries.
        public var maxBackoff: Duration = .seconds(5)
        /// How long one try may take.
        public var timeout: Duration = .seconds(5)
        /// Notifications sent at once.
        public var concurrency = 4
        /// How often the store is looked at for notifications still to send (with a store).
        public var rescanInterval: Duration = .seconds(60)

        /// The defaults: 5 tries, 200 ms doubling up to 5 s, 5 s per try, 4 at once, the store looked at every
        /// minute.
        public init() {}
    }

    /// Removes cache entries for an invalidation; returns how many went.
    public typealias Invalidate = @Sendable (InvalidationRequest) -> Int

    /// The configured handlers, in file order.
    public let handlers: [QueueConfiguration.Handler]
    private let invalidate: Invalidate
    private let eventLoopGroup: any EventLoopGroup
    private let webhook: WebhookPolicy
    private let logger: Logger
    private let drainTimeout: Duration
    private let events: AsyncStream<QueueOutcomeEvent>
    private let input: AsyncStream<QueueOutcomeEvent>.Continuation
    /// Outcomes waiting for their webhooks: taken events, and those read back from the store.
    private let notifications: AsyncStream<QueueOutcomeEvent>
    private let notificationInput: AsyncStream<QueueOutcomeEvent>.Continuation
    /// Which notifications a rescan of the store passes over.
    private let notifying = Mutex(NotificationsInHand())

    /// The ids queued or being sent, and those settled in this run: a rescan may read a row just before its
    /// mark is cleared, and an outcome a rescan already sent may still be on its way through `events`.
    private struct NotificationsInHand {
        var queuedOrSending: Set<String> = []
        var settled: Set<String> = []

        /// Takes `id` in hand, unless it is already.
        mutating func take(_ id: String) -> Bool {
            guard !settled.contains(id) else { return false }
            return queuedOrSending.insert(id).inserted
        }

        mutating func release(_ id: String, settled isSettled: Bool, remembering limit: Int) {
            queuedOrSending.remove(id)
            guard isSettled else { return }
            // Forgetting them all now and then is enough: the store's mark is the record that counts.
            if settled.count >= limit { settled.removeAll(keepingCapacity: true) }
            settled.insert(id)
        }
    }
    private let finished = WakeSignal()
    private let rescansEnd = WakeSignal()
    private let isFinishing = Atomic(false)
    private let capacity: Int
    /// Where outcomes awaiting notification are marked, when notifications are durable.
    private let store: (any QueueStore)?

    /// - Parameters:
    ///   - invalidate: removes cache entries; returns how many went.
    ///   - eventLoopGroup: for the webhook client.
    ///   - capacity: the most events waiting to be handled.
    ///   - drainTimeout: how long ``run(replaying:)`` goes on after ``finish()`` to handle what is left; webhook
    ///     calls still running then are cancelled, and those not started are logged as not sent.
    ///   - store: the queue's store, which keeps the outcomes awaiting notification; without one, notifications
    ///     live in memory only.
    public init(
        handlers: [QueueConfiguration.Handler],
        invalidate: @escaping Invalidate,
        eventLoopGroup: any EventLoopGroup,
        webhook: WebhookPolicy = .init(),
        capacity: Int = 10_000,
        drainTimeout: Duration = .seconds(5),
        store: (any QueueStore)? = nil,
        logger: Logger = Logger(label: "sdui-proxy.queue.handlers")
    ) {
        self.capacity = capacity
        self.store = store
        self.handlers = handlers
        self.invalidate = invalidate
        self.eventLoopGroup = eventLoopGroup
        self.webhook = webhook
        self.drainTimeout = drainTimeout
        self.logger = logger
        (events, input) = AsyncStream.makeStream(
            of: QueueOutcomeEvent.self,
            bufferingPolicy: .bufferingOldest(capacity)
        )
        (notifications, notificationInput) = AsyncStream.makeStream(
            of: QueueOutcomeEvent.self,
            bufferingPolicy: .bufferingOldest(capacity)
        )
    }

    /// Whether the store keeps `event` until its webhooks have heard of it: with a store, when a webhook
    /// applies to it.
    public func awaitsNotification(_ event: QueueOutcomeEvent) -> Bool {
        store != nil && !webhookURLs(for: event).isEmpty
    }

    private func webhookURLs(for event: QueueOutcomeEvent) -> [String] {
        handlers.compactMap { handler in
            guard handler.applies(to: event.outcome, routeKey: event.route), case .webhook(let url) = handler.action
            else { return nil }
            return url
        }
    }

    /// The outcomes whose notification an earlier run did not finish (a queue's worth at most, the rest come
    /// with the rescans); read them before deliveries start and hand them to ``run(replaying:)``.
    public func unnotifiedOutcomes() async -> [QueueOutcomeEvent] {
        let outcomes = await storedUnnotifiedOutcomes()
        if !outcomes.isEmpty {
            logger.info(
                "sending webhook notifications an earlier run did not",
                metadata: ["count": "\(outcomes.count)"]
            )
        }
        return outcomes
    }

    private func storedUnnotifiedOutcomes() async -> [QueueOutcomeEvent] {
        guard let store else { return [] }
        do {
            return try await store.unnotifiedOutcomes(limit: capacity)
        } catch {
            logger.error("cannot read the notifications still to send", metadata: ["error": "\(error)"])
            return []
        }
    }

    /// Hands over an outcome without waiting.
    public func submit(_ event: QueueOutcomeEvent) {
        guard handlers.contains(where: { $0.applies(to: event.outcome, routeKey: event.route) }) else { return }
        switch input.yield(event) {
        case .enqueued:
            break
        case .dropped:
            // Invalidations are lost with the event; a notification the store keeps is sent by a rescan.
            logger.error("queue handlers are behind; an outcome is not handled", metadata: ["id": "\(event.id)"])
        case .terminated:
            logger.warning("queue handlers have stopped; an outcome is not handled", metadata: ["id": "\(event.id)"])
        @unknown default:
            break
        }
    }

    /// No more events come: ``run(replaying:)`` returns once those submitted are handled, or after the drain
    /// timeout.
    public func finish() {
        isFinishing.store(true, ordering: .relaxed)
        input.finish()
        rescansEnd.signal()
        finished.signal()
    }

    /// Sends the notifications of `unnotified` (``unnotifiedOutcomes()``) and handles events until ``finish()``
    /// and the buffers are empty (or the drain timeout passed).
    public func run(replaying unnotified: [QueueOutcomeEvent] = []) async {
        let needsClient = handlers.contains { if case .webhook = $0.action { true } else { false } }
        let client =
            needsClient ? HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: .init()) : nil
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withTaskGroup(of: Void.self) { work in
                    work.addTask { await self.takeEvents() }
                    work.addTask { await self.sendNotifications(using: client) }
                    work.addTask { await self.rescanStore(startingWith: unnotified) }
                    await work.waitForAll()
                }
            }
            group.addTask {
                await self.finished.wait()
                guard !Task.isCancelled else { return }
                try? await Task.sleep(for: self.drainTimeout)
                if !Task.isCancelled {
                    self.logger.warning("queue handlers did not finish in time; the rest is cancelled")
                }
            }
            await group.next()
            group.cancelAll()
        }
        try? await client?.shutdown()
    }

    /// Runs each event's invalidations and queues its notification, until ``finish()``; then no more
    /// notifications come.
    private func takeEvents() async {
        for await event in events {
            for handler in handlers where handler.applies(to: event.outcome, routeKey: event.route) {
                switch handler.action {
                case .invalidatePrefix(let prefix): runInvalidation(.prefix(prefix), for: event)
                case .invalidateTag(let tag): runInvalidation(.tag(tag), for: event)
                case .webhook: break
                }
            }
            if !webhookURLs(for: event).isEmpty { queueNotification(event) }
        }
        // The rescans have stopped too, or stop at their next look.
        notificationInput.finish()
    }

    /// Reads back from the store, every rescan interval, the notifications still to send (none without a store),
    /// starting with those an earlier run left.
    private func rescanStore(startingWith unnotified: [QueueOutcomeEvent]) async {
        guard store != nil else { return }
        var found = unnotified
        while true {
            for event in found where !isFinishing.load(ordering: .relaxed) { queueNotification(event) }
            await rescansEnd.wait(upTo: webhook.rescanInterval)
            guard !isFinishing.load(ordering: .relaxed), !Task.isCancelled else { return }
            found = await storedUnnotifiedOutcomes()
        }
    }

    /// Queues `event` for its webhooks, unless it is queued or being sent already.
    private func queueNotification(_ event: QueueOutcomeEvent) {
        guard notifying.withLock({ $0.take(event.id) }) else { return }
        switch notificationInput.yield(event) {
        case .enqueued:
            return
        case .terminated:
            // Shutting down: an outcome read back from the store stays there.
            notifying.withLock { $0.release(event.id, settled: false, remembering: capacity) }
        case .dropped:
            notifying.withLock { $0.release(event.id, settled: false, remembering: capacity) }
            if store != nil {
                logger.warning(
                    "queue webhook notifications are behind; this one waits in the store",
                    metadata: ["id": "\(event.id)"]
                )
            } else {
                logger.error("queue webhook notifications are behind; one is not sent", metadata: ["id": "\(event.id)"])
            }
        @unknown default:
            return
        }
    }

    /// Sends the queued notifications, a few at a time, until their queue ends; once the drain timeout has
    /// passed, those not started are left (in the store, when there is one).
    private func sendNotifications(using client: HTTPClient?) async {
        var notSent: [String] = []
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for await event in notifications {
                if running >= webhook.concurrency {
                    await group.next()
                    running -= 1
                }
                // Cancelled once the drain timeout passed: a notification started now would be cancelled at once,
                // and might still reach the webhook half sent.
                guard !Task.isCancelled else {
                    notSent.append(event.id)
                    continue
                }
                running += 1
                group.addTask { await self.notifyWebhooks(of: event, using: client) }
            }
            await group.waitForAll()
        }
        if !notSent.isEmpty {
            logger.log(
                level: store == nil ? .error : .warning,
                store == nil
                    ? "queue webhook notifications not sent: shutting down"
                    : "queue webhook notifications not sent: shutting down; they are sent at the next start",
                metadata: [
                    "count": "\(notSent.count)",
                    "ids": "\(notSent.prefix(Self.idsLoggedAtMost).joined(separator: ","))",
                ]
            )
        }
    }

    /// How many ids of notifications not sent a log line lists.
    private static let idsLoggedAtMost = 20

    private func runInvalidation(_ request: InvalidationRequest, for event: QueueOutcomeEvent) {
        let removed = invalidate(request)
        logger.debug(
            "invalidated cache entries",
            metadata: ["id": "\(event.id)", "invalidation": "\(request)", "removed": "\(removed)"]
        )
    }

    /// How sending a notification to one webhook ended.
    private enum Delivery: Equatable {
        /// The webhook took it (2xx, 3xx).
        case taken
        /// The webhook refused it for good (a 4xx other than 429).
        case refused
        /// Every try failed on the network, a timeout, 429 or 5xx.
        case unreachable
        /// The shutdown cancelled it.
        case interrupted
    }

    /// Sends `event` to each of its webhooks (those of the configuration in force: an outcome read back from the
    /// store whose webhooks were removed since has none left), then clears its mark in the store unless the
    /// shutdown cut a sending short, which leaves the mark for the next start.
    private func notifyWebhooks(of event: QueueOutcomeEvent, using client: HTTPClient?) async {
        var settled = true
        defer { notifying.withLock { $0.release(event.id, settled: settled, remembering: capacity) } }
        for url in webhookURLs(for: event) {
            // There is a client whenever a webhook is configured.
            guard let client else { preconditionFailure("a webhook is configured, and no client was made") }
            if await notify(url, of: event, using: client) == .interrupted { settled = false }
        }
        guard settled, let store else { return }
        do {
            try await store.markNotified(id: event.id)
        } catch {
            settled = false
            logger.error(
                "cannot record a webhook notification as sent; it is sent again",
                metadata: ["id": "\(event.id)", "error": "\(error)"]
            )
        }
    }

    private func notify(_ url: String, of event: QueueOutcomeEvent, using client: HTTPClient) async -> Delivery {
        let body = ByteBuffer(string: event.json)
        var lastProblem = ""
        for attempt in 1...max(1, webhook.maxAttempts) {
            if attempt > 1 {
                let exponent = min(attempt - 2, 30)
                let wait = min(webhook.backoff * (1 << exponent), webhook.maxBackoff)
                do { try await Task.sleep(for: wait) } catch { break }
            }
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "Idempotency-Key", value: "\(event.id)-\(event.outcome.rawValue)")
            request.body = .bytes(body)
            do {
                let response = try await client.execute(
                    request,
                    timeout: webhook.timeout.timeAmount
                )
                _ = try? await response.body.collect(upTo: 64 * 1024)
                let code = Int(response.status.code)
                if (200..<400).contains(code) { return .taken }
                lastProblem = "the webhook answered \(code)"
                guard code == 429 || code >= 500 else {
                    logger.error(
                        "a queue webhook refused a notification",
                        metadata: ["id": "\(event.id)", "url": "\(url)", "error": "\(lastProblem)"]
                    )
                    return .refused
                }
            } catch {
                lastProblem = "\(error)"
            }
        }
        if Task.isCancelled, store != nil {
            logger.warning(
                "a queue webhook notification was cut short by the shutdown; it is sent at the next start",
                metadata: ["id": "\(event.id)", "url": "\(url)"]
            )
            return .interrupted
        }
        logger.error(
            "a queue webhook notification was not delivered",
            metadata: ["id": "\(event.id)", "url": "\(url)", "error": "\(lastProblem)"]
        )
        return Task.isCancelled ? .interrupted : .unreachable
    }
}

extension QueueResponseHandlers {
    /// An invalidation closure over `cache`: a prefix removes entries whose target is under it, a tag the
    /// entries that carry it (``InvalidationRequest/cacheInvalidation``).
    public static func invalidation(through invalidator: CacheInvalidator) -> Invalidate {
        // Through the invalidator, as every invalidation: it reaches the fills in flight too.
        { request in invalidator.invalidate(request.cacheInvalidation).responses }
    }
}
