import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

#if canImport(Glibc)
import Glibc
#endif

/// An offline client's create and the writes that name its local identifier, through the proxy over loopback: the
/// backend only ever sees its own identifier.
@Suite("creates through the proxy: writes that name a local identifier get the backend's")
struct LocalIdentifierProxyTests {
    static let json = [("Content-Type", "application/json")]

    /// Orders are created under `X-Local-Id` and named by the backend in `/id`; items and payments are queued routes
    /// of their own (payments concurrent).
    static func queueConfiguration(directory: String) -> QueueConfiguration {
        var queue = QueueConfiguration()
        queue.store = directory
        var retry = QueueConfiguration.RetryPolicy()
        retry.backoff = .milliseconds(20)
        retry.maxBackoff = .milliseconds(100)
        retry.maxAttempts = 10_000
        queue.routes = [
            .init(
                method: "POST",
                pathPrefix: "/api/orders",
                ordering: .sequential,
                retry: retry,
                creates: CreateRule(localId: .header("X-Local-Id"), remoteId: .json(JSONPointer("/id")!))
            ),
            .init(method: "PUT", pathPrefix: "/api/orders", ordering: .sequential, retry: retry),
            .init(method: "POST", pathPrefix: "/api/payments", ordering: .concurrent, retry: retry),
        ]
        return queue
    }

    /// The backend: a create answers 201 with `{"id":"R1"}` (or `createStatus`), anything else 200.
    static func backend(createStatus: NIOLockedValueBox<HTTPResponseStatus>) -> TestOrigin.Responder {
        { request in
            if request.method == .POST, request.uri == "/api/orders" {
                let status = createStatus.withLockedValue { $0 }
                let body = status == .created ? #"{"id":"R1","total":0}"# : #"{"error":"invalid order"}"#
                return TestOrigin.Response(status: status, body: body)
            }
            return TestOrigin.Response(status: .ok, body: "{}")
        }
    }

    private static func withProxy(
        createStatus: HTTPResponseStatus = .created,
        _ body: (ProxyHarness, NIOLockedValueBox<HTTPResponseStatus>) async throws -> Void
    ) async throws {
        let directory = WriteQueueProxyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let status = NIOLockedValueBox(createStatus)
        try await ProxyHarness.run(
            origin: backend(createStatus: status),
            configure: { $0.queue = queueConfiguration(directory: directory) }
        ) { proxy in
            try await body(proxy, status)
        }
    }

    /// The three writes of an offline client: the create, items under its local identifier, a payment naming it.
    private static func sendOfflineSequence(_ proxy: ProxyHarness) async throws -> [ProxyHarness.Reply] {
        let create = try await proxy.get(
            "/api/orders",
            headers: json + [("X-Local-Id", "tmp-7f3a")],
            method: .POST,
            body: #"{"localId":"tmp-7f3a","lines":[]}"#
        )
        let items = try await proxy.get(
            "/api/orders/tmp-7f3a/items",
            headers: json,
            method: .PUT,
            body: #"[{"sku":"A-1"}]"#
        )
        let payment = try await proxy.get(
            "/api/payments",
            headers: json,
            method: .POST,
            body: #"{"order":"tmp-7f3a","note":"tmp-7f3a1","nested":[{"for":"tmp-7f3a"}]}"#
        )
        return [create, items, payment]
    }

    private static func id(of reply: ProxyHarness.Reply) -> String {
        (QueueTest.json(reply.body)["id"] as? String) ?? ""
    }

    @Test("backend down, then up: the create, then its items and payment with the backend's identifier, each once")
    func offlineSequence() async throws {
        try await Self.withProxy { proxy, _ in
            try await proxy.origin.stop()
            let replies = try await Self.sendOfflineSequence(proxy)
            #expect(replies.map(\.status) == [.accepted, .accepted, .accepted])
            let createID = Self.id(of: replies[0])
            // Each dependent's 202 says which create it waits for.
            for reply in replies.dropFirst() {
                #expect(QueueTest.json(reply.body)["waitsFor"] as? [String] == [createID], "\(reply.body)")
            }
            let pending = try await proxy.admin("/queue/identifiers/tmp-7f3a")
            #expect(pending.body.contains(#""state":"pending""#), "\(pending.body)")

            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(20)) {
                try await proxy.admin("/queue").body.hasPrefix(#"{"depth":0,"#)
            }
            let seen = proxy.origin.requests
            #expect(seen.map { "\($0.method.rawValue) \($0.uri)" }.first == "POST /api/orders")
            #expect(Set(seen.map { "\($0.method.rawValue) \($0.uri)" }).count == seen.count, "each once")
            let items = try #require(
                proxy.origin.requests(to: "/api/orders/R1/items").first,
                "\(seen.map { "\($0.method) \($0.uri) \($0.status)" })"
            )
            #expect(String(buffer: items.body) == #"[{"sku":"A-1"}]"#)
            let payment = try #require(proxy.origin.requests(to: "/api/payments").first)
            #expect(String(buffer: payment.body) == #"{"order":"R1","note":"tmp-7f3a1","nested":[{"for":"R1"}]}"#)
            #expect(payment.headers.first(name: "content-length") == String(payment.body.readableBytes))
            // The payment's Idempotency-Key is its queue id, unchanged by the merge.
            #expect(payment.headers.first(name: "idempotency-key") == Self.id(of: replies[2]))
            for request in seen where request.uri != "/api/orders" {
                #expect(!request.uri.contains("tmp-7f3a/") && !String(buffer: request.body).contains(#""tmp-7f3a""#))
            }

            // The create's outcome carries both identifiers, publicly and for the operator.
            let status = try await proxy.get(try #require(replies[0]["Location"]))
            #expect(status.body.contains(#""localId":"tmp-7f3a","remoteId":"R1""#), "\(status.body)")
            let mapping = try await proxy.admin("/queue/identifiers/tmp-7f3a")
            #expect(mapping.body.contains(#""state":"merged""#) && mapping.body.contains(#""remoteId":"R1""#))
            #expect(try await proxy.admin("/queue/identifiers/tmp-none").status == .notFound)

            // Later, a write still naming the local identifier is rewritten on arrival and sent at once.
            let late = try await proxy.get("/api/orders/tmp-7f3a/items", headers: Self.json, method: .PUT, body: "[]")
            #expect(late.status == .ok, "\(late.status) \(late.body)")
            #expect(proxy.origin.requests(to: "/api/orders/R1/items").count == 2)

            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains("sdui_queue_identifier_merges_total 3"), "\(metrics)")
            #expect(metrics.contains("sdui_queue_pending_local_ids 0"))
        }
    }

    @Test("a create answered 422: the writes that name it end dependencyFailed and the backend never sees tmp-")
    func failedCreate() async throws {
        try await Self.withProxy(createStatus: .unprocessableEntity) { proxy, _ in
            try await proxy.origin.stop()
            let replies = try await Self.sendOfflineSequence(proxy)
            #expect(replies.map(\.status) == [.accepted, .accepted, .accepted])
            try await proxy.origin.restart()
            try await waitUntil(timeout: .seconds(20)) {
                try await proxy.admin("/queue").body.hasPrefix(#"{"depth":0,"#)
            }
            #expect(proxy.origin.requests.map(\.uri) == ["/api/orders"])
            let createID = Self.id(of: replies[0])
            for reply in replies.dropFirst() {
                let status = QueueTest.json(try await proxy.admin("/queue/" + Self.id(of: reply)).body)
                #expect(status["state"] as? String == "dependencyFailed")
                #expect(status["failedCreate"] as? String == createID)
                #expect((status["lastError"] as? String)?.contains("tmp-7f3a") == true)
            }
            let create = QueueTest.json(try await proxy.admin("/queue/" + createID).body)
            #expect(create["state"] as? String == "failed")
            #expect(create["localId"] as? String == "tmp-7f3a")
            // A write arriving later that names it ends the same way, without reaching the backend.
            let late = try await proxy.get("/api/orders/tmp-7f3a/items", headers: Self.json, method: .PUT, body: "[]")
            #expect(late.status == .accepted)
            try await waitUntil(timeout: .seconds(20)) {
                try await proxy.admin("/queue/" + Self.id(of: late)).body.contains("dependencyFailed")
            }
            #expect(proxy.origin.requests.map(\.uri) == ["/api/orders"])
            // The count moves just after the outcome is stored, which is what the wait above saw: waited for too.
            try await waitUntil(timeout: .seconds(20)) {
                try await proxy.admin("/metrics").body.contains("sdui_queue_dependency_failed_total 3")
            }
        }
    }

    @Test("a create without a sane local identifier is a 400; the same one twice while pending is a 409")
    func refusedCreates() async throws {
        try await Self.withProxy { proxy, _ in
            let missing = try await proxy.get("/api/orders", headers: Self.json, method: .POST, body: "{}")
            #expect(missing.status == .badRequest)
            #expect(missing.body.contains("X-Local-Id"))
            let odd = try await proxy.get(
                "/api/orders",
                headers: Self.json + [("X-Local-Id", "tmp 7f3a")],
                method: .POST,
                body: "{}"
            )
            #expect(odd.status == .badRequest)
            #expect(odd.body.contains("A-Z a-z 0-9"))
            let long = try await proxy.get(
                "/api/orders",
                headers: Self.json + [("X-Local-Id", String(repeating: "a", count: 129))],
                method: .POST,
                body: "{}"
            )
            #expect(long.status == .badRequest)

            try await proxy.origin.stop()
            let first = try await proxy.get(
                "/api/orders",
                headers: Self.json + [("X-Local-Id", "tmp-1")],
                method: .POST,
                body: "{}"
            )
            #expect(first.status == .accepted)
            let second = try await proxy.get(
                "/api/orders",
                headers: Self.json + [("X-Local-Id", "tmp-1")],
                method: .POST,
                body: "{}"
            )
            #expect(second.status == .conflict)
            #expect(second.body.contains(Self.id(of: first)))
            #expect(proxy.origin.requests.isEmpty)
            try await proxy.origin.restart()
        }
    }

    @Test(
        "the proxy killed (SIGKILL) between a create's delivery and its dependent's: the next one sends R1 only",
        // A guard against a hang only: it also counts the wait for an end-to-end slot in a full run.
        .timeLimit(.minutes(10))
    )
    func killedBetweenCreateAndDependent() async throws {
        // In a slot, as the harness's tests: two processes and their requests, not among a start-up's crowd.
        try await EndToEndSlots.withSlot { try await killedBetweenCreateAndDependentInSlot() }
    }

    private func killedBetweenCreateAndDependentInSlot() async throws {
        let gate = OriginGate()
        let holding = NIOLockedValueBox(true)
        let origin = try await TestOrigin { request in
            if request.method == .POST { return TestOrigin.Response(status: .created, body: #"{"id":"R1"}"#) }
            // The dependent's first delivery is held until the proxy sending it is dead.
            return holding.withLockedValue { $0 }
                ? TestOrigin.Response(status: .serviceUnavailable, body: "{}", heldBy: gate)
                : TestOrigin.Response(status: .ok, body: "{}")
        }
        let directory = WriteQueueProxyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/proxy.yaml"
        try """
        upstream: { url: "\(origin.url)", timeout: 30s }
        queue:
          store: "\(directory)/queue"
          routes:
            - match: POST /api/orders
              creates: { localId: { header: X-Local-Id }, remoteId: { json: /id } }
              retry: { maxAttempts: 1000, backoff: 50ms, maxBackoff: 200ms }
            - { match: PUT /api/orders, retry: { maxAttempts: 1000, backoff: 50ms, maxBackoff: 200ms } }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        do {
            let first = try await ProcessTests.RunningProxy(arguments: ["--config", config])
            let base = "http://127.0.0.1:\(first.publicPort)"
            let create = try await ProcessTests.get(
                base + "/api/orders",
                method: .POST,
                headers: Self.json + [("X-Local-Id", "tmp-7f3a")],
                body: "{}",
                timeout: nil
            )
            #expect(create.0 == .accepted)
            let items = try await ProcessTests.get(
                base + "/api/orders/tmp-7f3a/items",
                method: .PUT,
                headers: Self.json,
                body: #"{"order":"tmp-7f3a"}"#,
                timeout: nil
            )
            #expect(items.0 == .accepted, "\(items.2)")
            // The dependent reached the backend, which holds it: it was claimed only once the create was recorded.
            try await waitUntil(timeout: .seconds(20)) { origin.requests.contains { $0.method == .PUT } }
            first.process.signal(SIGKILL)
            _ = try await first.waitForExit()
            gate.open()

            holding.withLockedValue { $0 = false }
            let second = try await ProcessTests.RunningProxy(arguments: ["--config", config])
            // Polled until the queue is empty: one answer slower than a request's own deadline (a process starting
            // on a loaded machine) is one more round, not a failure.
            try await waitUntil(timeout: .seconds(20)) {
                let queue = try? await ProcessTests.get("http://127.0.0.1:\(second.adminPort)/queue")
                return queue?.2.hasPrefix(#"{"depth":0,"#) == true
            }
            let creates = origin.requests(to: "/api/orders")
            #expect(creates.count == 1, "the create was delivered once, before the kill")
            let puts = origin.requests.filter { $0.method == .PUT }
            #expect(puts.count >= 2, "sent by the proxy that died, and again by the next one")
            #expect(
                puts.allSatisfy { $0.uri == "/api/orders/R1/items" && String(buffer: $0.body) == #"{"order":"R1"}"# }
            )
            let key = QueueTest.json(items.2)["id"] as? String
            #expect(puts.allSatisfy { $0.headers.first(name: "idempotency-key") == key })
            #expect(puts.filter { $0.status == .ok }.count == 1)
        } catch {
            gate.open()
            try? await origin.stop()
            throw error
        }
        try await origin.stop()
    }
}
