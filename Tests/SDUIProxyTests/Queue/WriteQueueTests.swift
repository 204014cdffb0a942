import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxy
import SDUIProxyCore
import Testing

/// The façade the handler and the admin listener use: bounds, receipts and the status bodies.
@Suite struct WriteQueueTests {
    private typealias Route = QueueConfiguration.Route

    private func withQueue(
        routes: [Route],
        maxDepth: Int = 1000,
        maxBodyBytes: Int = 1 << 20,
        _ body: (WriteQueue) async throws -> Void
    ) async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let configuration = QueueTest.configuration(
            directory: directory,
            routes: routes,
            maxDepth: maxDepth,
            maxBodyBytes: maxBodyBytes
        )
        let queue = try await QueueTest.openQueue(configuration)
        do {
            try await body(queue)
        } catch {
            try? await queue.close()
            throw error
        }
        try await queue.close()
    }

    @Test("queue ids are 32 lower-case hex digits, and two are never the same")
    func ids() {
        let ids = (0..<1000).map { _ in WriteQueue.newID() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            #expect(id.utf8.count == 32)
            #expect(id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) })
        }
        // Every digit turns up: the hex table is not short of one.
        #expect(Set(ids.joined()).count == 16)
    }

    @Test func aFullQueueRefusesWith503() async throws {
        try await withQueue(routes: [Route(method: "POST", pathPrefix: "/api")], maxDepth: 2) { queue in
            _ = try await queue.enqueue(QueueTest.request(.POST, "/api/a", body: "1"))
            _ = try await queue.enqueue(QueueTest.request(.POST, "/api/b", body: "2"))
            do throws(ProxyError) {
                _ = try await queue.enqueue(QueueTest.request(.POST, "/api/c", body: "3"))
                Issue.record("a third request was queued past maxDepth 2")
            } catch {
                #expect(error.kind == .unavailable)
                #expect(error.status == .serviceUnavailable)
                #expect(error.isRetryable)
            }
            #expect(queue.depth == 2)
            let overview = QueueTest.json(await queue.overview().json)
            #expect(overview["depth"] as? Int == 2)
        }
    }

    @Test func aLargeBodyIsRefusedWith413() async throws {
        try await withQueue(routes: [Route(method: "POST", pathPrefix: "/api")], maxBodyBytes: 16) { queue in
            do throws(ProxyError) {
                _ = try await queue.enqueue(QueueTest.request(.POST, "/api/a", body: String(repeating: "x", count: 17)))
                Issue.record("a body over maxBodyBytes was queued")
            } catch {
                #expect(error.kind == .tooLarge)
                #expect(error.status == .payloadTooLarge)
            }
            let receipt = try await queue.enqueue(
                QueueTest.request(.POST, "/api/a", body: String(repeating: "x", count: 16))
            )
            #expect(!receipt.id.isEmpty)
            #expect(queue.depth == 1)
        }
    }

    @Test func aRequestOffTheQueuedRoutesIsRefused() async throws {
        try await withQueue(routes: [Route(method: "POST", pathPrefix: "/api/orders")]) { queue in
            #expect(queue.route(for: .POST, path: "/api/orders/7")?.key == "POST /api/orders")
            #expect(queue.route(for: .PUT, path: "/api/orders/7") == nil)
            #expect(queue.route(for: .POST, path: "/api/orders-export") == nil)
            do throws(ProxyError) {
                _ = try await queue.enqueue(QueueTest.request(.PUT, "/api/orders/7", body: "{}"))
                Issue.record("a request on no queued route was queued")
            } catch {
                #expect(error.kind == .internalError)
            }
            #expect(queue.depth == 0)
        }
    }

    @Test func receiptAndStatusBodies() async throws {
        let routes = [
            Route(method: "POST", pathPrefix: "/api/orders"),
            Route(method: "DELETE", pathPrefix: "/api/carts", ordering: .concurrent),
        ]
        try await withQueue(routes: routes) { queue in
            let receipt = try await queue.enqueue(QueueTest.request(.POST, "/api/orders?x=1", body: "{}"))
            #expect(receipt.status == .accepted)
            #expect(receipt.id.count == 32)
            #expect(receipt.location == "/.sdui/queue/\(receipt.id)")
            let receiptJSON = QueueTest.json(receipt.json)
            #expect(receiptJSON["queued"] as? Bool == true)
            #expect(receiptJSON["id"] as? String == receipt.id)

            let status = await queue.status(id: receipt.id)
            #expect(status.status == .ok)
            let fields = QueueTest.json(status.json)
            #expect(fields["state"] as? String == "pending")
            #expect(fields["route"] as? String == "POST /api/orders")
            #expect(fields["target"] as? String == "/api/orders?x=1")
            #expect(fields["attempts"] as? Int == 0)
            #expect(fields["nextAttemptAt"] is String)
            // What the client sees of it: the outcome, not what the write carried nor where it went.
            let client = QueueTest.json(try #require(try await queue.store.status(id: receipt.id)).publicJSON)
            #expect(Set(client.keys) == ["id", "state", "attempts", "enqueuedAt", "nextAttemptAt"])
            #expect(client["state"] as? String == "pending" && client["id"] as? String == receipt.id)

            let unknown = await queue.status(id: "no-such-id")
            #expect(unknown.status == .notFound)
            let error = QueueTest.json(unknown.json)["error"] as? [String: Any]
            #expect(error?["kind"] as? String == "notFound")

            let overview = QueueTest.json(await queue.overview().json)
            #expect(overview["depth"] as? Int == 1)
            let routeList = overview["routes"] as? [[String: Any]] ?? []
            #expect(routeList.map { $0["route"] as? String } == ["POST /api/orders", "DELETE /api/carts"])
            #expect(routeList.map { $0["depth"] as? Int } == [1, 0])
            #expect(routeList.map { $0["ordering"] as? String } == ["sequential", "concurrent"])
            #expect(((routeList.first?["oldestAgeSeconds"] as? Double) ?? -1) >= 0)
            #expect(routeList.last?["oldestAgeSeconds"] is NSNull)
        }
    }

    @Test func aFailedForwardIsRecordedAndWaitsOneBackoff() async throws {
        var retry = QueueConfiguration.RetryPolicy()
        retry.backoff = .seconds(10)
        retry.maxBackoff = .seconds(10)
        try await withQueue(routes: [Route(method: "POST", pathPrefix: "/api", retry: retry)]) { queue in
            var request = QueueTest.request(.POST, "/api/a", body: "{}")
            request.failure = "network: connection refused"
            // The id the immediate forward carried as Idempotency-Key is kept.
            let id = WriteQueue.newID()
            request.id = id
            let receipt = try await queue.enqueue(request)
            #expect(receipt.id == id)
            do throws(ProxyError) {
                request.id = "not a token"
                _ = try await queue.enqueue(request)
                Issue.record("an id with spaces was accepted")
            } catch {
                #expect(error.kind == .internalError)
            }
            #expect(queue.depth == 1)
            let entry = try await queue.store.firstPending(route: "POST /api")
            #expect(entry?.id == receipt.id)
            #expect(entry?.attempts == 0)
            #expect(entry?.lastError == "network: connection refused")
            let wait = (entry?.nextAttemptAt ?? .now()).duration(since: .now())
            #expect(wait > .seconds(4) && wait <= .seconds(10))
        }
    }
}
