import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The delivery service against a real origin on 127.0.0.1, with a real SQLite store in a temporary directory.
@Suite struct QueueDeliveryTests {
    private typealias Route = QueueConfiguration.Route

    @Test func deliversInOrderExactlyOnceWhenTheBackendComesBack() async throws {
        let origin = try await QueueTestOrigin.start()
        try await origin.stop()
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let route = Route(method: "POST", pathPrefix: "/api/orders", ordering: .sequential, retry: QueueTest.retry())
        let queue = try await QueueTest.openQueue(QueueTest.configuration(directory: directory, routes: [route]))
        let client = try QueueTest.client(port: origin.port)

        var receipts: [QueueReceipt] = []
        for index in 0..<5 {
            let request = QueueTest.request(
                .POST,
                "/api/orders?n=\(index)",
                body: #"{"order":\#(index)}"#,
                headers: [("X-Order", "\(index)")]
            )
            receipts.append(try await queue.enqueue(request))
        }
        #expect(queue.depth == 5)
        #expect(receipts.allSatisfy { $0.location == "/.sdui/queue/" + $0.id && $0.route == "POST /api/orders" })

        let ids = receipts.map(\.id)
        let service = QueueDeliveryService(
            queue: queue,
            client: client,
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger
        )
        try await QueueTest.withRunningService(service) {
            // While the origin is down the head of the line is tried again and again, the others wait.
            let retried = await QueueTest.waitUntil { await (QueueTest.status(queue, ids[0]).attempts ?? 0) >= 2 }
            #expect(retried)
            #expect(await QueueTest.status(queue, ids[1]).attempts == 0)
            try await origin.start()
            let drained = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(drained)
        }

        let seen = origin.requests
        #expect(seen.count == 5)
        #expect(seen.map(\.idempotencyKey) == ids)
        #expect(seen.map(\.uri) == (0..<5).map { "/api/orders?n=\($0)" })
        #expect(seen.map(\.body) == (0..<5).map { #"{"order":\#($0)}"# })
        #expect(seen.map { $0.headers.first(name: "X-Order") } == (0..<5).map { "\($0)" })
        #expect(seen.allSatisfy { $0.method == .POST && $0.headers.first(name: "Content-Type") == "application/json" })
        for id in ids {
            let status = await QueueTest.status(queue, id)
            #expect(status.state == "delivered")
            #expect(status.status == 200)
        }
        try await client.shutdown()
        try await queue.close()
        try await origin.stop()
    }

    /// Each attempt that cannot reach the backend is a backend failure, counted as a cache fill's is; once
    /// delivered, the attempts that failed before are history and the status shows no error.
    @Test func failedAttemptsCountEachTimeAndADeliveredWriteShowsNoError() async throws {
        let origin = try await QueueTestOrigin.start()
        try await origin.stop()
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        // Never given up before the test brings the origin back, however slowly the machine runs it.
        let route = Route(
            method: "POST",
            pathPrefix: "/api/orders",
            ordering: .sequential,
            retry: QueueTest.retry(maxAttempts: 100_000)
        )
        let queue = try await QueueTest.openQueue(QueueTest.configuration(directory: directory, routes: [route]))
        let client = try QueueTest.client(port: origin.port)
        let metrics = ProxyMetrics()
        let receipt = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: "{}"))
        let service = QueueDeliveryService(
            queue: queue,
            client: client,
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger,
            metrics: metrics
        )
        /// Failed attempts counted, whatever their kind: refused while the origin is down, but one that meets the
        /// origin as it comes back may end another way (a reset, a timeout on a loaded machine).
        func upstreamErrors() -> Int {
            metrics.render().split(separator: "\n").filter { $0.hasPrefix("sdui_upstream_errors_total{") }
                .compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }.reduce(0, +)
        }
        try await QueueTest.withRunningService(service) {
            let retried = await QueueTest.waitUntil { await (QueueTest.status(queue, receipt.id).attempts ?? 0) >= 3 }
            #expect(retried)
            let pending = await QueueTest.status(queue, receipt.id)
            #expect(pending.lastError != nil)
            // Counted before each is recorded: at least as many as the status shows.
            #expect(upstreamErrors() >= pending.attempts ?? 0)
            try await origin.start()
            let drained = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(drained)
        }
        let delivered = await QueueTest.status(queue, receipt.id)
        #expect(delivered.state == "delivered")
        #expect(delivered.status == 200)
        #expect(delivered.lastError == nil)
        #expect(delivered.fields["lastError"] == nil)
        // Every attempt but the last failed, and each was counted.
        #expect(upstreamErrors() == (delivered.attempts ?? 0) - 1)
        #expect((delivered.attempts ?? 0) >= 4)
        try await client.shutdown()
        try await queue.close()
        try await origin.stop()
    }

    @Test func deliversEverythingInOrderAfterACrash() async throws {
        let origin = try await QueueTestOrigin.start()
        origin.setBehaviour { _, _, _ in .init(status: .serviceUnavailable) }
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let route = Route(method: "PUT", pathPrefix: "/api/profile", ordering: .sequential, retry: QueueTest.retry())
        let configuration = QueueTest.configuration(directory: directory, routes: [route])
        let client = try QueueTest.client(port: origin.port)

        // First life: requests are queued and tried while the backend answers 503, then the process "dies":
        // the delivery task is cancelled without a graceful shutdown, and nothing is closed or flushed.
        let firstStore = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        let firstQueue = try await WriteQueue(configuration: configuration, store: firstStore, logger: QueueTest.logger)
        var receipts: [QueueReceipt] = []
        for index in 0..<6 {
            receipts.append(
                try await firstQueue.enqueue(QueueTest.request(.PUT, "/api/profile/\(index)", body: "v\(index)"))
            )
        }
        let ids = receipts.map(\.id)
        let firstService = QueueDeliveryService(
            queue: firstQueue,
            client: client,
            eventLoopGroup: QueueTest.group,
            logger: QueueTest.logger
        )
        let firstLife = Task { try await firstService.run() }
        let tried = await QueueTest.waitUntil { origin.requests.count >= 3 }
        #expect(tried)
        firstLife.cancel()
        _ = try? await firstLife.value
        firstStore.releaseLockAsProcessDeathWould()

        // Second life: a new store and queue over the same directory, and the backend is healthy.
        origin.setBehaviour { _, _, _ in .init(status: .created) }
        let secondQueue = try await QueueTest.openQueue(configuration)
        #expect(secondQueue.depth == 6)
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

        let delivered = origin.successfulRequests
        #expect(delivered.map(\.idempotencyKey) == ids)
        #expect(delivered.map(\.body) == (0..<6).map { "v\($0)" })
        #expect(Set(delivered.compactMap(\.idempotencyKey)).count == delivered.count)
        let first = await QueueTest.status(secondQueue, ids[0])
        #expect(first.state == "delivered")
        #expect(first.status == 201)
        // The attempts of the first life were kept: at least the two recorded before the third was sent.
        #expect((first.attempts ?? 0) >= 3)
        try await secondQueue.close()
        try await firstStore.close()
        try await client.shutdown()
        try await origin.stop()
    }

    /// Once the backend has answered, a store that fails to record it is tried again; the backend is not.
    @Test func aStoreThatCannotRecordADeliveryDoesNotSendItAgain() async throws {
        let origin = try await QueueTestOrigin.start()
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let route = Route(method: "POST", pathPrefix: "/api/orders", ordering: .sequential, retry: QueueTest.retry())
        let configuration = QueueTest.configuration(directory: directory, routes: [route])
        let store = FailingQueueStore(
            try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger),
            failingMarkDelivered: 3
        )
        let queue = try await WriteQueue(configuration: configuration, store: store, logger: QueueTest.logger)
        let receipt = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: "once"))
        let client = try QueueTest.client(port: origin.port)
        let service = QueueDeliveryService(
            queue: queue,
            client: client,
            eventLoopGroup: QueueTest.group,
            storeRetryDelay: .milliseconds(50),
            logger: QueueTest.logger
        )
        try await QueueTest.withRunningService(service) {
            let drained = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(drained)
        }
        #expect(store.markDeliveredCalls == 4)
        #expect(origin.requests.map(\.body) == ["once"])
        #expect(await QueueTest.status(queue, receipt.id).state == "delivered")
        try await client.shutdown()
        try await queue.close()
        try await origin.stop()
    }

    @Test func aClientErrorFailsAfterOneAttempt() async throws {
        let origin = try await QueueTestOrigin.start()
        origin.setBehaviour { _, _, _ in .init(status: .badRequest) }
        try await withQueue(
            port: origin.port,
            routes: [Route(method: "POST", pathPrefix: "/api", retry: QueueTest.retry())]
        ) {
            queue in
            let receipt = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: "{}"))
            let finished = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(finished)
            let status = await QueueTest.status(queue, receipt.id)
            #expect(status.state == "failed")
            #expect(status.status == 400)
            #expect(status.lastError?.contains("400") == true)
            // An attempt that could not connect (a busy machine) may come first; the 400 is never retried.
            #expect((status.attempts ?? 0) >= 1)
        }
        #expect(origin.requests.count == 1)
        try await origin.stop()
    }

    @Test func retriesStopAtMaxAttempts() async throws {
        let origin = try await QueueTestOrigin.start()
        origin.setBehaviour { _, _, _ in .init(status: .serviceUnavailable) }
        let route = Route(method: "POST", pathPrefix: "/api", retry: QueueTest.retry(maxAttempts: 3))
        try await withQueue(port: origin.port, routes: [route]) { queue in
            let receipt = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: "{}"))
            let finished = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(finished)
            let status = await QueueTest.status(queue, receipt.id)
            #expect(status.state == "failed")
            #expect(status.attempts == 3)
            #expect(status.status == 503)
            #expect(status.lastError?.contains("after 3 attempts") == true)
        }
        // Never more than the attempts allowed (an attempt that failed to connect never reaches the origin).
        #expect((1...3).contains(origin.requests.count))
        try await origin.stop()
    }

    @Test func retriesStopAtMaxAge() async throws {
        let refusing = try RefusingPort()
        // Every attempt is refused at once; the retry delays leave room for several within the maximum age.
        let retry = QueueTest.retry(maxAttempts: 1000, maxAge: .milliseconds(3000))
        try await withQueue(port: refusing.port, routes: [Route(method: "POST", pathPrefix: "/api", retry: retry)]) {
            queue in
            let clock = ContinuousClock()
            let start = clock.now
            let receipt = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: "{}"))
            let finished = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(finished)
            #expect(clock.now - start >= .milliseconds(2500))
            let status = await QueueTest.status(queue, receipt.id)
            #expect(status.state == "failed")
            #expect((status.attempts ?? 0) >= 2)
            #expect(status.status == nil)
            #expect(status.lastError?.contains("maxAge") == true)
            #expect(status.lastError?.contains("network") == true)
        }
        withExtendedLifetime(refusing) {}
    }

    @Test func concurrentRoutesDeliverInParallelUpToTheLimit() async throws {
        let origin = try await QueueTestOrigin.start()
        // A second each: three deliveries overlap at the backend even when a loaded machine starts them apart.
        origin.setBehaviour { _, _, _ in .init(status: .ok, delay: .seconds(1)) }
        let route = Route(method: "POST", pathPrefix: "/api/events", ordering: .concurrent, retry: QueueTest.retry())
        var ids: Set<String> = []
        // All nine are queued before the deliverer starts: enqueued one by one while it runs, on a busy machine
        // each could be delivered before the next was written, and the limit would never be reached.
        try await withQueue(
            port: origin.port,
            routes: [route],
            concurrency: 3,
            before: { queue in
                for index in 0..<9 {
                    ids.insert(try await queue.enqueue(QueueTest.request(.POST, "/api/events", body: "\(index)")).id)
                }
            }
        ) { queue in
            let drained = await QueueTest.waitUntil { queue.depth == 0 }
            #expect(drained)
        }
        #expect(Set(origin.requests.compactMap(\.idempotencyKey)) == ids)
        #expect(origin.requests.count == 9)
        #expect(origin.maxInFlight == 3)
        try await origin.stop()
    }

    @Test func anEnqueueWakesTheDelivererAtOnce() async throws {
        let origin = try await QueueTestOrigin.start()
        let routes = [
            Route(method: "POST", pathPrefix: "/api/orders", retry: QueueTest.retry()),
            Route(method: "POST", pathPrefix: "/api/events", ordering: .concurrent, retry: QueueTest.retry()),
        ]
        // The poll interval is far longer than the test may take: only the wake-up can deliver in time.
        try await withQueue(port: origin.port, routes: routes, pollInterval: .seconds(120)) { queue in
            // Both workers have looked at the empty store and wait: what follows can only be their wake-up.
            let waiting = await QueueTest.waitUntil(timeout: .seconds(5)) {
                queue.routeSignals["POST /api/orders"]?.hasWaiter == true && queue.concurrentSignal.hasWaiter
            }
            #expect(waiting)
            _ = try await queue.enqueue(QueueTest.request(.POST, "/api/orders/1", body: "a"))
            _ = try await queue.enqueue(QueueTest.request(.POST, "/api/events", body: "b"))
            let delivered = await QueueTest.waitUntil(timeout: .seconds(5)) { queue.depth == 0 }
            #expect(delivered)
        }
        #expect(origin.requests.map(\.body).sorted() == ["a", "b"])
        try await origin.stop()
    }

    @Test func gracefulShutdownFinishesTheDeliveryInFlightAndStartsNoOther() async throws {
        let origin = try await QueueTestOrigin.start()
        // Long enough that the shutdown comes while "a" is in flight on a loaded machine too, and well within the
        // upstream timeout (10 s), so that the answer still comes in time.
        origin.setBehaviour { _, _, _ in .init(status: .ok, delay: .seconds(2)) }
        var receipts: [QueueReceipt] = []
        try await withQueue(
            port: origin.port,
            routes: [Route(method: "POST", pathPrefix: "/api", retry: QueueTest.retry())]
        ) {
            queue in
            receipts.append(try await queue.enqueue(QueueTest.request(.POST, "/api/a", body: "a")))
            receipts.append(try await queue.enqueue(QueueTest.request(.POST, "/api/b", body: "b")))
            let started = await QueueTest.waitUntil { origin.inFlight == 1 }
            #expect(started)
            // Returning shuts the service down while the first delivery is in flight.
        } after: { queue in
            let first = await QueueTest.status(queue, receipts[0].id)
            #expect(first.state == "delivered")
            #expect(first.status == 200)
            let second = await QueueTest.status(queue, receipts[1].id)
            #expect(second.state == "pending")
            #expect(second.attempts == 0)
            #expect(queue.depth == 1)
        }
        #expect(origin.requests.map(\.body) == ["a"])
        try await origin.stop()
    }

    /// Opens a queue in a temporary directory, runs a delivery service to the server on `port` around `body`,
    /// shuts it down gracefully, runs `after`, and cleans up.
    private func withQueue(
        port: Int,
        routes: [Route],
        concurrency: Int = 16,
        pollInterval: Duration = .seconds(5),
        before: (WriteQueue) async throws -> Void = { _ in },
        _ body: (WriteQueue) async throws -> Void,
        after: (WriteQueue) async throws -> Void = { _ in }
    ) async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let configuration = QueueTest.configuration(directory: directory, routes: routes, concurrency: concurrency)
        let queue = try await QueueTest.openQueue(configuration)
        let client = try QueueTest.client(port: port)
        let service = QueueDeliveryService(
            queue: queue,
            client: client,
            eventLoopGroup: QueueTest.group,
            pollInterval: pollInterval,
            logger: QueueTest.logger
        )
        do {
            try await before(queue)
            try await QueueTest.withRunningService(service) { try await body(queue) }
            try await after(queue)
        } catch {
            try? await client.shutdown()
            try? await queue.close()
            throw error
        }
        try await client.shutdown()
        try await queue.close()
    }
}
