import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Creates and their dependents across a crash of the delivering process: a write merged once is stored merged, and
/// the next life sends that, never the local identifier.
@Suite struct LocalIdentifierDeliveryTests {
    private typealias Route = QueueConfiguration.Route

    private static let routes = [
        Route(
            method: "POST",
            pathPrefix: "/api/orders",
            ordering: .sequential,
            retry: QueueTest.retry(),
            creates: CreateRule(
                localId: .header("X-Local-Id"),
                remoteId: .headerPattern("Location", pattern: "/api/orders/{id}")
            )
        ),
        Route(method: "PUT", pathPrefix: "/api/orders", ordering: .sequential, retry: QueueTest.retry()),
    ]

    /// Queues `request` on `queue` as the proxy does: its identifiers planned first.
    private static func enqueue(_ request: QueuedRequest, on queue: WriteQueue) async throws -> QueueReceipt {
        let upstream = UpstreamRequest(
            method: request.method,
            target: request.target,
            headers: request.headers,
            body: request.body
        )
        let route = try #require(queue.route(for: request.method, path: request.path))
        let plan = try await queue.identifierPlan(for: upstream, route: route)
        #expect(plan.mustQueue)
        return try await queue.enqueue(QueuedRequest(plan.request, localId: plan.localId, names: plan.names))
    }

    @Test func aDependentMergedBeforeACrashIsSentMergedAfterIt() async throws {
        let origin = try await QueueTestOrigin.start()
        // First life: the create is taken (its identifier in an absolute Location), its dependents are not.
        origin.setBehaviour { head, _, _ in
            head.method == .POST
                ? .init(status: .created, body: "{}", location: "http://backend.test/api/orders/981?from=create")
                : .init(status: .serviceUnavailable)
        }
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let configuration = QueueTest.configuration(directory: directory, routes: Self.routes)
        let client = try QueueTest.client(port: origin.port)

        let firstStore = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        let firstQueue = try await WriteQueue(configuration: configuration, store: firstStore, logger: QueueTest.logger)
        let create = try await Self.enqueue(
            QueueTest.request(.POST, "/api/orders", body: "{}", headers: [("X-Local-Id", "tmp-7f3a")]),
            on: firstQueue
        )
        let items = try await Self.enqueue(
            QueueTest.request(.PUT, "/api/orders/tmp-7f3a/items?order=tmp-7f3a", body: #"{"order":"tmp-7f3a"}"#),
            on: firstQueue
        )
        #expect(items.waitsFor == [create.id])
        let firstService = QueueDeliveryService(
            queue: firstQueue,
            client: client,
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger
        )
        let firstLife = Task { try await firstService.run() }
        let tried = await QueueTest.waitUntil { origin.requests.filter { $0.method == .PUT }.count >= 2 }
        #expect(tried)
        firstLife.cancel()
        _ = try? await firstLife.value
        firstStore.releaseLockAsProcessDeathWould()

        // What the store holds is the merged write, with no create left to wait for.
        let stored = try #require(try await firstStore.firstPending(route: "PUT /api/orders"))
        #expect(stored.target == "/api/orders/981/items?order=981")
        #expect(stored.body.map { String(buffer: $0) } == #"{"order":"981"}"#)
        #expect(stored.dependsOn.isEmpty)

        // Second life: the backend takes everything; the write goes out merged, under the same Idempotency-Key.
        origin.setBehaviour { _, _, _ in .init(status: .ok) }
        let secondQueue = try await QueueTest.openQueue(configuration)
        let secondService = QueueDeliveryService(
            queue: secondQueue,
            client: client,
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger
        )
        try await QueueTest.withRunningService(secondService) {
            let drained = await QueueTest.waitUntil { secondQueue.depth == 0 }
            #expect(drained)
        }
        let puts = origin.requests.filter { $0.method == .PUT }
        #expect(puts.allSatisfy { $0.uri == "/api/orders/981/items?order=981" && $0.body == #"{"order":"981"}"# })
        #expect(puts.allSatisfy { $0.idempotencyKey == items.id })
        #expect(origin.successfulRequests.filter { $0.method == .PUT }.count == 1)
        let createStatus = await QueueTest.status(secondQueue, create.id)
        #expect(createStatus.fields["remoteId"] as? String == "981")
        // The ledger of the second life starts from the store: a write naming the identifier now is merged at once.
        let upstream = UpstreamRequest(method: .PUT, target: "/api/orders/tmp-7f3a", headers: HTTPHeaders(), body: nil)
        let plan = try await secondQueue.identifierPlan(for: upstream, route: Self.routes[1])
        #expect(plan.request.target == "/api/orders/981")
        #expect(!plan.mustQueue)
        try await secondQueue.close()
        try await firstStore.close()
        try await client.shutdown()
        try await origin.stop()
    }
}
