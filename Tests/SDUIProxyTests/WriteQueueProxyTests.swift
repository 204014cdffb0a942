import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Queued write routes through the proxy")
struct WriteQueueProxyTests {
    static func queueConfiguration(directory: String) -> QueueConfiguration {
        var queue = QueueConfiguration()
        queue.store = directory
        queue.maxBodyBytes = 1024
        var route = QueueConfiguration.Route(
            method: "POST",
            pathPrefix: "/api/orders",
            ordering: .sequential,
            retry: .init()
        )
        route.retry.backoff = .milliseconds(20)
        route.retry.maxBackoff = .milliseconds(100)
        // Quick retries, never given up: twenty of them (the default) pass in about two seconds, which a loaded
        // machine can spend between a test stopping the backend and starting it again.
        route.retry.maxAttempts = 10_000
        queue.routes = [route]
        return queue
    }

    static func temporaryDirectory() -> String {
        let path = NSTemporaryDirectory() + "sdui-queue-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs `body` against a proxy whose `/api/orders` writes are queued in a store of their own, removed after.
    private static func withQueuedWrites(
        origin: @escaping TestOrigin.Responder = { _ in TestOrigin.Response(status: .created, headers: [], body: "ok")
        },
        configure: ((inout ProxyConfiguration) -> Void)? = nil,
        _ body: (ProxyHarness) async throws -> Void
    ) async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await ProxyHarness.run(
            origin: origin,
            configure: {
                $0.queue = queueConfiguration(directory: directory)
                configure?(&$0)
            },
            body
        )
    }

    @Test("a write's answer goes to the client as it streams in, whatever its size")
    func immediateAnswerOfAnySize() async throws {
        let large = String(repeating: "x", count: 64 << 10)
        try await Self.withQueuedWrites(
            origin: { _ in TestOrigin.Response(status: .created, headers: [("Content-Type", "text/plain")], body: large)
            },
            configure: { $0.upstream.maxResponseBytes = 1024 }
        ) { proxy async throws in
            let reply = try await proxy.get("/api/orders", method: .POST, body: "{}")
            #expect(reply.status == .created)
            #expect(reply.body == large)
            #expect(try await proxy.admin("/queue").body.contains(#""depth":0"#))
            #expect(proxy.origin.requests(to: "/api/orders").count == 1)
        }
    }

    @Test("a backend that refuses connections gets the write queued at once, not after upstream.connectTimeout")
    func refusedConnectionQueuesAtOnce() async throws {
        try await Self.withQueuedWrites(configure: {
            // Longer than the test client waits (10 s): a 202 shows the refusal was not retried until then.
            $0.upstream.connectTimeout = .seconds(60)
            $0.upstream.timeout = .seconds(60)
        }) { proxy async throws in
            try await proxy.origin.stop()
            let accepted = try await proxy.get("/api/orders", method: .POST, body: #"{"n":1}"#)
            #expect(accepted.status == .accepted)
            #expect(accepted.body.contains(#""queued":true"#))
            // Pass-through too: a bypassed request is answered 502 at once.
            let passed = try await proxy.get("/api/other", method: .POST, body: "{}")
            #expect(passed.status == .badGateway)
            try await proxy.origin.restart()
        }
    }

    @Test("a write the backend answers with a retryable status is queued; its answer does not reach the client")
    func retryableAnswerQueues() async throws {
        let refusing = NIOLockedValueBox(true)
        try await Self.withQueuedWrites(origin: { _ in
            refusing.withLockedValue { $0 }
                ? TestOrigin.Response(
                    status: .serviceUnavailable,
                    headers: [("Content-Type", "text/plain")],
                    body: "busy"
                )
                : TestOrigin.Response(status: .created, headers: [], body: "ok")
        }) { proxy async throws in
            let accepted = try await proxy.get("/api/orders", method: .POST, body: #"{"n":1}"#)
            #expect(accepted.status == .accepted)
            #expect(accepted.body.contains(#""queued":true"#))
            #expect(!accepted.body.contains("busy"))
            let location = try #require(accepted["Location"])
            refusing.withLockedValue { $0 = false }
            try await waitUntil(timeout: .seconds(10)) { try await proxy.admin("/queue").body.contains(#""depth":0"#) }
            #expect(try await proxy.get(location).body.contains("delivered"))
            let next = try await proxy.get("/api/orders", method: .POST, body: #"{"n":2}"#)
            #expect(next.status == .created, "\(next.status) \(next.body)")
        }
    }

    @Test("a delivery is judged by the backend's status, whatever the size of the answer's body")
    func deliveryWithALargeAnswer() async throws {
        try await Self.withQueuedWrites(
            origin: { _ in
                TestOrigin.Response(status: .created, headers: [], body: String(repeating: "x", count: 64 << 10))
            },
            configure: { $0.upstream.maxResponseBytes = 1024 }
        ) { proxy async throws in
            try await proxy.origin.stop()
            let accepted = try await proxy.get("/api/orders", method: .POST, body: "{}")
            let location = try #require(accepted["Location"])
            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(10)) { !(try await proxy.get(location).body.contains("pending")) }
            let status = try await proxy.get(location).body
            #expect(status.contains(#""state":"delivered""#))
            #expect(status.contains(#""status":201"#))
            #expect(proxy.origin.requests(to: "/api/orders").count == 1)
        }
    }

    @Test("a delivery whose answer is cut short after its head is recorded with that status, not sent again")
    func deliveryWithAnAnswerCutShort() async throws {
        try await Self.withQueuedWrites(
            origin: { _ in
                // The head promises 100 bytes of body; 2 come, and the body's idle limit ends the exchange.
                var response = TestOrigin.Response(status: .created, headers: [], body: "ok")
                response.declaredLength = 100
                return response
            },
            configure: { $0.upstream.bodyIdleTimeout = .seconds(1) }
        ) { proxy async throws in
            try await proxy.origin.stop()
            let location = try #require(try await proxy.get("/api/orders", method: .POST, body: "{}")["Location"])
            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(10)) { try await proxy.get(location).body.contains("delivered") }
            #expect(try await proxy.get(location).body.contains(#""status":201"#))
            #expect(proxy.origin.requests(to: "/api/orders").count == 1)
        }
    }

    @Test("a client's own Idempotency-Key goes with the write, at once and on every delivery")
    func clientsIdempotencyKeyKept() async throws {
        try await Self.withQueuedWrites { proxy async throws in
            let key = [("Idempotency-Key", "order-7f3a")]
            #expect(try await proxy.get("/api/orders", headers: key, method: .POST, body: "{}").status == .created)
            try await proxy.origin.stop()
            #expect(try await proxy.get("/api/orders", headers: key, method: .POST, body: "{}").status == .accepted)
            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(10)) { proxy.origin.requests(to: "/api/orders").count == 2 }
            #expect(
                proxy.origin.requests(to: "/api/orders").map { $0.headers["idempotency-key"] } == [
                    ["order-7f3a"], ["order-7f3a"],
                ]
            )
        }
    }

    @Test("a write the backend cannot take is stored, answered 202, and delivered once the backend is back")
    func storedAndDelivered() async throws {
        try await Self.withQueuedWrites { proxy async throws in
            try await proxy.origin.stop()
            let accepted = try await proxy.get("/api/orders", method: .POST, body: #"{"n":1}"#)
            #expect(accepted.status == .accepted)
            #expect(accepted.body.contains(#""queued":true"#))
            let location = try #require(accepted["Location"])
            #expect(location.hasPrefix("/.sdui/queue/"))
            let pending = try await proxy.get(location)
            #expect(pending.body.contains("pending"))

            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(10)) { proxy.origin.requests(to: "/api/orders").count == 1 }
            let delivered = try #require(proxy.origin.requests(to: "/api/orders").first)
            #expect(String(buffer: delivered.body) == #"{"n":1}"#)
            #expect(
                delivered.headers.first(name: "idempotency-key")
                    == String(location.dropFirst(RequestRouter.queueStatusPrefix.count))
            )
            try await waitUntil { try await proxy.get(location).body.contains("delivered") }
            let overview = try await proxy.admin("/queue")
            #expect(overview.status == .ok)
        }
    }

    @Test("a queued write's Location is its public status: the outcome, never the request's headers or body")
    func publicStatus() async throws {
        try await Self.withQueuedWrites { proxy async throws in
            try await proxy.origin.stop()
            let secret = [("Authorization", "Bearer s3cret"), ("X-Card", "4111")]
            let accepted = try await proxy.get("/api/orders?token=t0k", headers: secret, method: .POST, body: "pan-42")
            #expect(accepted.status == .accepted)
            let location = try #require(accepted["Location"])
            let id = String(location.dropFirst(RequestRouter.queueStatusPrefix.count))
            #expect(location == RequestRouter.queueStatusPrefix + id && WriteQueue.isQueueID(id))
            let pending = try await proxy.get(location)
            #expect(pending.status == .ok && pending["Cache-Control"] == "no-store")
            #expect(pending.body.contains(#""state":"pending""#) && pending.body.contains(#""id":"\#(id)""#))
            for carried in ["s3cret", "4111", "t0k", "pan-42", "/api/orders", "POST"] {
                #expect(!pending.body.contains(carried), "\(carried) in \(pending.body)")
            }
            // The status is the proxy's own: the backend never sees it asked for, and it is not a cache miss.
            #expect(pending["X-Cache"] == nil)
            #expect(try await proxy.get(location, method: .HEAD).status == .ok)

            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(10)) { try await proxy.get(location).body.contains("delivered") }
            let delivered = try await proxy.get(location).body
            #expect(delivered.contains(#""status":201"#) && delivered.contains("finishedAt"), "\(delivered)")
            #expect(proxy.origin.requests.allSatisfy { !$0.uri.hasPrefix("/.sdui/") })
            // The admin listener's status, with the request's route and target, stays.
            #expect(try await proxy.admin("/queue/" + id).body.contains(#""target":"/api/orders?token=t0k""#))

            // An id no write has, or one the queue could not have made, is a JSON 404 without asking the backend.
            for unknown in [String(repeating: "0", count: 32), "1", id.uppercased()] {
                let reply = try await proxy.get(RequestRouter.queueStatusPrefix + unknown)
                #expect(reply.status == .notFound, "\(unknown)")
                #expect(reply.body.contains(#""kind":"notFound""#), "\(reply.body)")
            }
            #expect(proxy.origin.requests.allSatisfy { !$0.uri.hasPrefix("/.sdui/") })
        }
    }

    @Test("on a sequential route a new write queues behind the backlog instead of overtaking it")
    func newWriteQueuesBehindTheBacklog() async throws {
        // The first retry comes three to six seconds after the refusal (the backoff's jitter halves it at most):
        // time for the second write to arrive, on a loaded machine too.
        try await Self.withQueuedWrites(configure: {
            $0.queue?.routes[0].retry.backoff = .seconds(6)
            $0.queue?.routes[0].retry.maxBackoff = .seconds(6)
        }) { proxy async throws in
            try await proxy.origin.stop()
            let first = try await proxy.get("/api/orders", method: .POST, body: "A")
            #expect(first.status == .accepted)
            try await proxy.origin.restart()
            let second = try await proxy.get("/api/orders", method: .POST, body: "B")
            #expect(second.status == .accepted)
            try await waitUntil(timeout: .seconds(15)) { proxy.origin.requests(to: "/api/orders").count == 2 }
            #expect(proxy.origin.requests(to: "/api/orders").map { String(buffer: $0.body) } == ["A", "B"])
            // With the backlog delivered, the next write goes straight through.
            try await waitUntil { try await proxy.admin("/queue").body.contains(#""depth":0"#) }
            let third = try await proxy.get("/api/orders", method: .POST, body: "C")
            #expect(third.status == .created)
        }
    }

    @Test("a write the backend answers is passed through, 4xx included, and not queued")
    func answeredWritesPassThrough() async throws {
        try await Self.withQueuedWrites(origin: { _ in
            TestOrigin.Response(
                status: .unprocessableEntity,
                headers: [("Content-Type", "text/plain")],
                body: "bad order"
            )
        }) { proxy async throws in
            let reply = try await proxy.get("/api/orders", method: .POST, body: "{}")
            #expect(reply.status == .unprocessableEntity)
            #expect(reply.body == "bad order")
            // Queued writes are stored before the answer goes out: one that was would be pending now, or would
            // have been sent again already.
            #expect(try await proxy.admin("/queue").body.contains(#""depth":0"#))
            #expect(proxy.origin.requestCount == 1)
            #expect(proxy.origin.requests.first?.headers.contains(name: "idempotency-key") == true)
        }
    }

    @Test("a body over queue.maxBodyBytes is refused with 413 and never forwarded")
    func bodyTooLarge() async throws {
        try await Self.withQueuedWrites { proxy async throws in
            let reply = try await proxy.get("/api/orders", method: .POST, body: String(repeating: "x", count: 2048))
            #expect(reply.status == .payloadTooLarge)
            #expect(reply.body.contains(#""kind":"tooLarge""#))
            #expect(proxy.origin.requestCount == 0)
        }
    }
}
