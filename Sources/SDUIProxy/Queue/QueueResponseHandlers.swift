import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

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

    /// An event with the given fields.
    public init(
        id: String,
        route: String,
        outcome: QueueConfiguration.Outcome,
        status: Int?,
        attempts: Int,
        error: String? = nil
    ) {
        self.id = id
        self.route = route
        self.outcome = outcome
        self.status = status
        self.attempts = attempts
        self.error = error
    }

    /// The webhook notification: `{"id", "route", "outcome", "status", "attempts"}`, plus `"error"` when failed.
    public var json: String {
        var fields = [
            #""id":\#(JSONText.quoted(id))"#,
            #""route":\#(JSONText.quoted(route))"#,
            #""outcome":"\#(outcome.rawValue)""#,
            #""status":\#(status.map(String.init) ?? "null")"#,
            #""attempts":\#(attempts)"#,
        ]
        if let error { fields.append(#""error":\#(JSONText.quoted(error))"#) }
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// Runs the `queue.handlers` (Lucid's response handlers) when queued requests reach their final outcome:
/// cache invalidations through an injected closure and webhook notifications over their own `HTTPClient`.
///
/// ``submit(_:)`` never waits: events go into a bounded buffer that ``run(replaying:)`` works through, so a slow
/// webhook never holds up delivery. Webhooks are retried (network errors, 429 and 5xx) with backoff, a few at a
/// time. The ``QueueDeliveryService`` runs this; ``run(replaying:)`` may be called once.
///
/// With a store, webhook notifications are durable: the store marks an outcome that a webhook must hear of in
/// the same change that records it, and the mark goes once every webhook took the notification or gave up on
/// it. A notification cut short by a shutdown or a crash, or dropped from a full buffer, is sent at the next
/// start (``unnotifiedOutcomes()``), under the same `Idempotency-Key`.
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

        /// The defaults: 5 tries, 200 ms doubling up to 5 s, 5 s per try, 4 at once.
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
    private let finished = WakeSignal()
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

    /// The outcomes whose notification an earlier run did not finish (a buffer's worth at most); read them
    /// before deliveries start and hand them to ``run(replaying:)``.
    public func unnotifiedOutcomes() async -> [QueueOutcomeEvent] {
        guard let store, handlers.contains(where: { if case .webhook = $0.action { true } else { false } }) else {
            return []
        }
        do {
            let outcomes = try await store.unnotifiedOutcomes(limit: capacity)
            if !outcomes.isEmpty {
                logger.info(
                    "sending webhook notifications an earlier run did not",
                    metadata: ["count": "\(outcomes.count)"]
                )
            }
            return outcomes
        } catch {
            logger.error("cannot read the notifications an earlier run did not send", metadata: ["error": "\(error)"])
            return []
        }
    }

    /// Hands over an outcome without waiting.
    public func submit(_ event: QueueOutcomeEvent) {
        guard handlers.contains(where: { $0.applies(to: event.outcome, routeKey: event.route) }) else { return }
        switch input.yield(event) {
        case .enqueued:
            break
        case .dropped where awaitsNotification(event):
            logger.warning(
                "queue handlers are behind; an outcome's notification waits for the next start",
                metadata: ["id": "\(event.id)"]
            )
        case .dropped:
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
        input.finish()
        finished.signal()
    }

    /// Sends the notifications of `unnotified` (``unnotifiedOutcomes()``), then handles events until ``finish()``
    /// and the buffer is empty (or the drain timeout passed).
    public func run(replaying unnotified: [QueueOutcomeEvent] = []) async {
        let needsClient = handlers.contains { if case .webhook = $0.action { true } else { false } }
        let client =
            needsClient ? HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: .init()) : nil
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.process(replaying: unnotified, client: client) }
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

    private func process(replaying unnotified: [QueueOutcomeEvent], client: HTTPClient?) async {
        var notSent: [String] = []
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            /// Sends `event` to its webhooks, a few events at a time.
            func notify(_ event: QueueOutcomeEvent, at urls: [String]) async {
                guard let client, !urls.isEmpty else { return }
                if running >= webhook.concurrency {
                    await group.next()
                    running -= 1
                }
                // Cancelled once the drain timeout passed: a notification started now would be cancelled at once,
                // and might still reach the webhook half sent.
                guard !Task.isCancelled else { return notSent.append(event.id) }
                running += 1
                group.addTask { await self.notify(urls, of: event, using: client) }
            }
            // An earlier run's outcomes: the cache they would invalidate is gone with that run.
            for event in unnotified { await notify(event, at: webhookURLs(for: event)) }
            for await event in events {
                for handler in handlers where handler.applies(to: event.outcome, routeKey: event.route) {
                    switch handler.action {
                    case .invalidatePrefix(let prefix): runInvalidation(.prefix(prefix), for: event)
                    case .invalidateTag(let tag): runInvalidation(.tag(tag), for: event)
                    case .webhook: break
                    }
                }
                await notify(event, at: webhookURLs(for: event))
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

    /// Sends `event` to each of `urls`, then records it notified, unless a shutdown cut the sending short: it
    /// then stays in the store for the next start.
    private func notify(_ urls: [String], of event: QueueOutcomeEvent, using client: HTTPClient) async {
        for url in urls { await notify(url, of: event, using: client) }
        guard let store, !Task.isCancelled else { return }
        do {
            try await store.markNotified(id: event.id)
        } catch {
            logger.error(
                "cannot record a webhook notification as sent; it is sent again at the next start",
                metadata: ["id": "\(event.id)", "error": "\(error)"]
            )
        }
    }

    private func notify(_ url: String, of event: QueueOutcomeEvent, using client: HTTPClient) async {
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
                if (200..<400).contains(code) { return }
                lastProblem = "the webhook answered \(code)"
                guard code == 429 || code >= 500 else { break }
            } catch {
                lastProblem = "\(error)"
            }
        }
        guard !Task.isCancelled || store == nil else {
            return logger.warning(
                "a queue webhook notification was cut short by the shutdown; it is sent at the next start",
                metadata: ["id": "\(event.id)", "url": "\(url)"]
            )
        }
        logger.error(
            "a queue webhook notification was not delivered",
            metadata: ["id": "\(event.id)", "url": "\(url)", "error": "\(lastProblem)"]
        )
    }
}

extension QueueResponseHandlers {
    /// An invalidation closure over `cache`: a prefix removes entries whose target starts with it, a tag the
    /// entries that carry it.
    public static func invalidation(of cache: ResponseCache) -> Invalidate {
        { request in
            switch request {
            case .prefix(let prefix): cache.purge(prefix: prefix)
            case .tag(let tag): cache.purge(tag: tag)
            }
        }
    }
}
