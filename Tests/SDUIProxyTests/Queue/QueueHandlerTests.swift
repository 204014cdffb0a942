import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SDUIProxy
import SDUIProxyCore
import Synchronization
import Testing

/// Response handlers: invalidations and webhook notifications on final outcomes, over real sockets.
@Suite struct QueueHandlerTests {
    private final class Invalidations: Sendable {
        let requests = Mutex<[InvalidationRequest]>([])

        func record(_ request: InvalidationRequest) -> Int {
            requests.withLock { $0.append(request) }
            return 1
        }
    }

    @Test("a handler's invalidation goes through the cache's invalidator, and so reaches the fills in flight too")
    func handlerInvalidationReachesFillsInFlight() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let invalidate = QueueResponseHandlers.invalidation(through: CacheInvalidator(cache: cache))
        let ticket = cache.beginFill(target: "/screens/orders/1")
        #expect(invalidate(.prefix("/screens/orders")) == 0)
        let answer = CachedResponse(
            status: .ok,
            headers: ["Content-Type": "application/json", "Cache-Control": "max-age=60"],
            body: ByteBuffer(string: "{}"),
            metadata: CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
        let key = CacheKey(target: "/screens/orders/1", platform: "WEB")
        guard case .voided = cache.storeFill(answer, for: key, ticket: ticket) else {
            Issue.record("the fill in flight was stored after the handler's invalidation")
            return
        }
        cache.endFill(ticket)
        #expect(cache.statistics.entries == 0)
    }

    @Test func handlersInvalidateAndNotifyOnTheirOutcomes() async throws {
        let backend = try await QueueTestOrigin.start()
        backend.setBehaviour { head, _, _ in .init(status: head.uri.hasSuffix("/bad") ? .unprocessableEntity : .created)
        }
        let webhook = try await QueueTestOrigin.start()
        // The webhook is unavailable at first: its first notification must be retried.
        webhook.setBehaviour { _, _, count in .init(status: count == 0 ? .serviceUnavailable : .noContent) }

        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let routes = [
            QueueConfiguration.Route(method: "POST", pathPrefix: "/api/orders", retry: QueueTest.retry()),
            QueueConfiguration.Route(method: "POST", pathPrefix: "/api/other", retry: QueueTest.retry()),
        ]
        let handlerConfiguration: [QueueConfiguration.Handler] = [
            .init(outcomes: [.delivered], route: "POST /api/orders", action: .invalidatePrefix("/screens/orders")),
            .init(outcomes: [.failed], action: .invalidateTag("orders")),
            .init(outcomes: [.delivered, .failed], route: "POST /api/orders", action: .webhook(webhook.url + "/hook")),
        ]
        let configuration = QueueTest.configuration(
            directory: directory,
            routes: routes,
            handlers: handlerConfiguration
        )
        let queue = try await QueueTest.openQueue(configuration)
        let client = try QueueTest.client(port: backend.port)
        let invalidations = Invalidations()
        var policy = QueueResponseHandlers.WebhookPolicy()
        policy.backoff = .milliseconds(20)
        let handlers = QueueResponseHandlers(
            handlers: configuration.handlers,
            invalidate: { invalidations.record($0) },
            eventLoopGroup: QueueTest.group,
            webhook: policy,
            logger: QueueTest.logger
        )
        let service = QueueDeliveryService(
            queue: queue,
            client: client,
            handlers: handlers,
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger
        )

        let good = try await queue.enqueue(QueueTest.request(.POST, "/api/orders/1", body: "{}"))
        let bad = try await queue.enqueue(QueueTest.request(.POST, "/api/orders/bad", body: "{}"))
        let other = try await queue.enqueue(QueueTest.request(.POST, "/api/other/1", body: "{}"))
        try await QueueTest.withRunningService(service) {
            let notified = await QueueTest.waitUntil { webhook.successfulRequests.count == 2 }
            #expect(notified)
            let invalidated = await QueueTest.waitUntil { invalidations.requests.withLock { $0.count } == 2 }
            #expect(invalidated)
        }

        // The delivered order invalidates its prefix, the failed one the tag; the other route only the tag rule
        // would match, and it was delivered, so nothing.
        #expect(
            Set(invalidations.requests.withLock { $0.map(\.description) }) == ["prefix /screens/orders", "tag orders"]
        )
        #expect(await QueueTest.status(queue, other.id).state == "delivered")

        let posts = webhook.requests
        // The first post is refused and sent again; two may reach the webhook at once while it is unavailable,
        // and a taken one may come again (see below): at least 3 posts.
        #expect(posts.count >= 3)
        #expect(posts.first.map { $0.status == 503 } == true)
        #expect(posts.allSatisfy { $0.method == .POST && $0.uri == "/hook" })
        #expect(posts.allSatisfy { $0.headers.first(name: "Content-Type") == "application/json" })
        // Notifications are at least once: one sent again (an answer lost on a loaded machine) must be the same
        // notification under the same Idempotency-Key, so receivers can drop the copy.
        let taken = webhook.successfulRequests
        let keys = Dictionary(grouping: taken, by: { $0.headers.first(name: "Idempotency-Key") ?? "" })
        #expect(keys.values.allSatisfy { copies in copies.allSatisfy { $0.body == copies[0].body } })
        let notifications = taken.map { QueueTest.json($0.body) }
        let byID = Dictionary(notifications.map { (($0["id"] as? String) ?? "", $0) }, uniquingKeysWith: { $1 })
        #expect(Set(byID.keys) == [good.id, bad.id])
        #expect(Set(keys.keys) == ["\(good.id)-delivered", "\(bad.id)-failed"])
        #expect(byID[good.id]?["outcome"] as? String == "delivered")
        #expect(byID[good.id]?["status"] as? Int == 201)
        #expect(byID[good.id]?["route"] as? String == "POST /api/orders")
        #expect(byID[bad.id]?["outcome"] as? String == "failed")
        #expect(byID[bad.id]?["status"] as? Int == 422)
        #expect(byID[bad.id]?["attempts"] as? Int == 1)
        #expect(byID[other.id] == nil)
        // Every refused notification is sent again, unchanged, until it is taken.
        #expect(posts.allSatisfy { post in taken.contains { $0.body == post.body } })

        try await client.shutdown()
        try await queue.close()
        try await backend.stop()
        try await webhook.stop()
    }

    /// A backend, a webhook that holds every notification until the fixture stops, and a queue whose `/api` route
    /// notifies it, with a policy that sends one notification at a time and never gives up on the stuck one during a
    /// test.
    private struct StuckWebhook {
        let backend: QueueTestOrigin
        let webhook: QueueTestOrigin
        let configuration: QueueConfiguration
        let queue: WriteQueue
        let client: LoopLocalHTTPClient
        let policy: QueueResponseHandlers.WebhookPolicy
        /// Holds the webhook's answers; opened by `stop()`.
        let stuck = OriginGate()

        init(directory: String, otherHandlers: [QueueConfiguration.Handler] = []) async throws {
            backend = try await QueueTestOrigin.start()
            webhook = try await QueueTestOrigin.start()
            webhook.setBehaviour { [stuck] _, _, _ in .init(status: .ok, heldBy: stuck) }
            let route = QueueConfiguration.Route(method: "POST", pathPrefix: "/api", retry: QueueTest.retry())
            configuration = QueueTest.configuration(
                directory: directory,
                routes: [route],
                handlers: [.init(action: .webhook(webhook.url + "/hook"))] + otherHandlers
            )
            queue = try await QueueTest.openQueue(configuration)
            client = try QueueTest.client(port: backend.port)
            var policy = QueueResponseHandlers.WebhookPolicy()
            policy.concurrency = 1
            // Longer than any test, so the stuck notification is not retried while it runs.
            policy.timeout = .seconds(3600)
            self.policy = policy
        }

        /// A delivery service for the queue, whose handlers drain for 200 ms and keep their notifications in
        /// `store` (none: in memory only).
        func service(
            store: (any QueueStore)?,
            invalidate: @escaping QueueResponseHandlers.Invalidate = { _ in 0 },
            logger: Logger = QueueTest.logger
        ) -> QueueDeliveryService {
            QueueDeliveryService(
                queue: queue,
                client: client,
                handlers: QueueResponseHandlers(
                    handlers: configuration.handlers,
                    invalidate: invalidate,
                    eventLoopGroup: QueueTest.group,
                    webhook: policy,
                    drainTimeout: .milliseconds(200),
                    store: store,
                    logger: logger
                ),
                eventLoopGroup: QueueTest.group,
                logger: QueueTest.logger
            )
        }

        func stop() async throws {
            stuck.open()
            try await client.shutdown()
            try await queue.close()
            try await backend.stop()
            try await webhook.stop()
        }
    }

    @Test func aStuckWebhookDoesNotHoldUpDelivery() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let fixture = try await StuckWebhook(directory: directory)
        let (queue, backend, webhook) = (fixture.queue, fixture.backend, fixture.webhook)
        let logs = LineCollector()
        let service = fixture.service(
            store: nil,
            logger: Logger(label: "queue-handlers") {
                LoggingBootstrap.makeHandler(label: $0, format: .json, level: .info, sink: logs.sink)
            }
        )
        try await QueueTest.withRunningService(service) {
            for index in 0..<5 {
                _ = try await queue.enqueue(QueueTest.request(.POST, "/api/\(index)", body: "\(index)"))
            }
            // All five are delivered while the first notification is still stuck in the webhook.
            let delivered = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(delivered)
            let notifying = await QueueTest.waitUntil { webhook.inFlight == 1 }
            #expect(notifying)
            #expect(webhook.requests.count == 1)
        }
        // The service stopped while the webhook still held its answer (the gate opens only in `fixture.stop()`, and
        // the notification's timeout is an hour): shutting down waited for the drain timeout, not for the webhook.
        #expect(backend.requests.count == 5)
        #expect(webhook.requests.count == 1)
        // The stuck notification was cancelled; the four still waiting for it were not started (each started
        // one was cancelled at once, and sometimes reached the webhook first), and are reported as not sent.
        let entries = try logs.objects()
        let notDelivered = entries.filter { $0["msg"] as? String == "a queue webhook notification was not delivered" }
        #expect(notDelivered.count == 1)
        let notSent = entries.first { $0["msg"] as? String == "queue webhook notifications not sent: shutting down" }
        #expect(notSent?["count"] as? String == "4")
        try await fixture.stop()
    }

    @Test func notificationsCutShortByAShutdownAreSentAtTheNextStartOnce() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let fixture = try await StuckWebhook(directory: directory)
        let (queue, webhook) = (fixture.queue, fixture.webhook)
        func service() -> QueueDeliveryService { fixture.service(store: queue.store) }

        // The first run delivers three writes and stops while the webhook holds the first notification.
        var ids: Set<String> = []
        try await QueueTest.withRunningService(service()) {
            for index in 0..<3 {
                ids.insert(try await queue.enqueue(QueueTest.request(.POST, "/api/\(index)", body: "{}")).id)
            }
            let delivered = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(delivered)
            let notifying = await QueueTest.waitUntil { webhook.inFlight == 1 }
            #expect(notifying)
        }
        #expect(Set(try await queue.store.unnotifiedOutcomes(limit: 10).map(\.id)) == ids)
        let firstRunPosts = webhook.requests.count

        // The next run sends all three, and records them sent.
        webhook.setBehaviour { _, _, _ in .init(status: .noContent) }
        let keys = Set(ids.map { "\($0)-delivered" })
        try await QueueTest.withRunningService(service()) {
            let sent = await QueueTest.waitUntil {
                Set(webhook.requests.dropFirst(firstRunPosts).compactMap(\.idempotencyKey)) == keys
            }
            #expect(sent)
            #expect(webhook.requests.dropFirst(firstRunPosts).count == 3)
            let recorded = await QueueTest.waitUntil {
                (try? await queue.store.unnotifiedOutcomes(limit: 10).isEmpty) == true
            }
            #expect(recorded)
        }
        try await fixture.stop()
    }

    @Test func invalidationsDoNotWaitForAStuckWebhook() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let fixture = try await StuckWebhook(
            directory: directory,
            otherHandlers: [.init(action: .invalidatePrefix("/screens/orders"))]
        )
        let invalidations = Invalidations()
        let service = fixture.service(store: fixture.queue.store, invalidate: { invalidations.record($0) })
        try await QueueTest.withRunningService(service) {
            for index in 0..<5 {
                _ = try await fixture.queue.enqueue(QueueTest.request(.POST, "/api/\(index)", body: "{}"))
            }
            // The webhook holds the first notification until the test ends; every write's invalidation runs meanwhile.
            let invalidated = await QueueTest.waitUntil {
                invalidations.requests.withLock { $0.count } == 5
            }
            #expect(invalidated)
            let holding = await QueueTest.waitUntil { fixture.webhook.requests.count == 1 }
            #expect(holding)
        }
        try await fixture.stop()
    }

    @Test func rescansSendWhatTheStoreStillMarksAndGiveUpOnAnUnreachableWebhook() async throws {
        let backend = try await QueueTestOrigin.start()
        let webhook = try await QueueTestOrigin.start()
        // Unreachable for the first notification's two tries; then it takes them.
        webhook.setBehaviour { _, _, count in .init(status: count < 2 ? .serviceUnavailable : .noContent) }
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let route = QueueConfiguration.Route(method: "POST", pathPrefix: "/api", retry: QueueTest.retry())
        let configuration = QueueTest.configuration(
            directory: directory,
            routes: [route],
            handlers: [.init(route: "POST /api", action: .webhook(webhook.url + "/hook"))]
        )
        let queue = try await QueueTest.openQueue(configuration)
        /// Records a delivered outcome awaiting its notification straight into the store, as a run whose
        /// notification queue was full leaves it. The entry is inserted, then marked delivered: it is inserted due an
        /// hour from now, so that the running delivery service cannot claim it in between.
        func markedOutcome(_ id: String, route: String) async throws {
            let now = QueueInstant.now()
            try await queue.store.insert(
                QueueEntry(
                    id: id,
                    route: route,
                    method: .POST,
                    target: "/x",
                    headers: HTTPHeaders(),
                    body: nil,
                    enqueuedAt: now,
                    nextAttemptAt: now.advanced(by: .seconds(3600))
                )
            )
            _ = try await queue.store.markDelivered(
                id: id,
                status: 200,
                attempts: 1,
                at: now,
                awaitingNotification: true
            )
        }
        // An outcome an earlier configuration had a webhook for: none applies to its route now.
        try await markedOutcome("old", route: "POST /gone")
        let client = try QueueTest.client(port: backend.port)
        var policy = QueueResponseHandlers.WebhookPolicy()
        policy.maxAttempts = 2
        policy.backoff = .milliseconds(10)
        policy.rescanInterval = .milliseconds(200)
        // The count of webhook requests is exact: a try that a stalled machine keeps past the default 5 s would be
        // tried again, one request more (seen in loaded runs).
        policy.timeout = .seconds(120)
        let service = QueueDeliveryService(
            queue: queue,
            client: client,
            handlers: QueueResponseHandlers(
                handlers: configuration.handlers,
                invalidate: { _ in 0 },
                eventLoopGroup: QueueTest.group,
                webhook: policy,
                store: queue.store,
                logger: QueueTest.logger
            ),
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger
        )
        try await QueueTest.withRunningService(service) {
            // Refused twice: given up, and cleared, so that no rescan sends it again.
            _ = try await queue.enqueue(QueueTest.request(.POST, "/api/1", body: "{}"))
            let givenUp = await QueueTest.waitUntil {
                let cleared = (try? await queue.store.unnotifiedOutcomes(limit: 10).isEmpty) == true
                return cleared && webhook.requests.count == 2
            }
            #expect(givenUp)
            // Marked while the run goes on: the next rescan sends it.
            try await markedOutcome("rescued", route: "POST /api")
            let heard = await QueueTest.waitUntil {
                webhook.successfulRequests.map(\.idempotencyKey) == ["rescued-delivered"]
            }
            #expect(heard)
            let cleared = await QueueTest.waitUntil {
                (try? await queue.store.unnotifiedOutcomes(limit: 10).isEmpty) == true
            }
            #expect(cleared)
            // Two more rescans send nothing again: each is seen to have run by the outcome marked before it,
            // which only a rescan sends.
            for later in ["later-1", "later-2"] {
                try await markedOutcome(later, route: "POST /api")
                let sent = await QueueTest.waitUntil {
                    webhook.successfulRequests.last?.idempotencyKey == "\(later)-delivered"
                }
                #expect(sent)
            }
        }
        #expect(webhook.requests.filter { $0.idempotencyKey?.hasPrefix("later-") != true }.count == 3)
        #expect(webhook.requests.count == 5)
        try await client.shutdown()
        try await queue.close()
        try await backend.stop()
        try await webhook.stop()
    }
}
