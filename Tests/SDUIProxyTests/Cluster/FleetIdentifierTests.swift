import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization
import Testing

@testable import SDUIProxy

#if canImport(Glibc)
import Glibc
#endif

/// An offline client's create and the writes that name it, each accepted by another replica of a fleet that shares
/// its queue in PostgreSQL, with the replica delivering the create killed (SIGKILL) as it does.
@Suite(
    "a fleet's creates: a dependent accepted by one replica waits for a create another delivers",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer,
    .serialized
)
struct FleetIdentifierTests {
    enum Mode {
        /// 503 to everything, retried.
        case down
        /// The next write is held until the test ends, then answered 503.
        case holding
        /// A create is answered 201 with `{"id":"R1"}`, anything else 200.
        case up
    }

    /// The queue section every replica runs with, as YAML (the killed replica reads it from its file).
    private static func queueYAML(store: String) -> String {
        """
        queue:
          store: "\(store)"
          leaseTimeout: 8s
          routes:
            - match: POST /api/orders
              ordering: sequential
              retry: { maxAttempts: 1000, backoff: 50ms, maxBackoff: 200ms }
              creates: { localId: { header: X-Local-Id }, remoteId: { json: /id } }
            - { match: PUT /api/orders, ordering: sequential, retry: { maxAttempts: 1000, backoff: 50ms, maxBackoff: 200ms } }
            - { match: POST /api/payments, ordering: concurrent, retry: { maxAttempts: 1000, backoff: 50ms, maxBackoff: 200ms } }
        """
    }

    private static func startReplica(_ name: String, origin: TestOrigin, store: String) async throws -> ProxyServer {
        var configuration = try ConfigurationLoader().load(
            yaml: "upstream: { url: \"\(origin.url)\", timeout: 5s }\n" + queueYAML(store: store)
        )
        configuration.listen = ProxyHarness.testConfiguration(upstream: origin.url).listen
        configuration.admin = ProxyHarness.testConfiguration(upstream: origin.url).admin
        configuration.cluster.replicaName = name
        return try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
    }

    @Test("three writes through three replicas, the create's deliverer killed: each sent once, with R1, in order")
    func dependentsAcrossReplicas() async throws {
        try await EndToEndSlots.withSlot { try await dependentsAcrossReplicasInSlot() }
    }

    private func dependentsAcrossReplicasInSlot() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let store = "postgres://\(url.user):\(url.password ?? "")@\(url.host):\(url.port)/\(url.database)"
        let mode = Mutex(Mode.down)
        let gate = OriginGate()
        let origin = try await TestOrigin { request in
            switch mode.withLock({ $0 }) {
            case .down: return TestOrigin.Response(status: .serviceUnavailable, body: "{}")
            case .holding: return TestOrigin.Response(status: .serviceUnavailable, body: "{}", heldBy: gate)
            case .up:
                guard request.method == .POST, request.uri == "/api/orders" else {
                    return TestOrigin.Response(status: .ok, body: "{}")
                }
                return TestOrigin.Response(status: .created, body: #"{"id":"R1"}"#)
            }
        }
        let directory = NSTemporaryDirectory() + "sdui-fleet-ids-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/replica-c.yaml"
        try
            ("upstream: { url: \"\(origin.url)\", timeout: 5s }\ncluster: { replicaName: c }\n"
            + Self.queueYAML(store: store))
            .write(toFile: config, atomically: true, encoding: .utf8)
        #expect(chmod(config, 0o600) == 0)

        var inProcess: [ProxyServer] = []
        func shutDownInProcess() async {
            for replica in inProcess { await replica.shutdown(drainTimeout: .seconds(1)) }
            inProcess = []
        }
        let json = [("Content-Type", "application/json")]
        do {
            let c = try await ProcessTests.RunningProxy(arguments: ["--config", config])
            inProcess = [
                try await Self.startReplica("a", origin: origin, store: store),
                try await Self.startReplica("b", origin: origin, store: store),
            ]
            let (a, b) = (inProcess[0], inProcess[1])
            // The backend is down: the create through c, the items through a, the payment through b.
            let create = try await ProcessTests.get(
                "http://127.0.0.1:\(c.publicPort)/api/orders",
                method: .POST,
                headers: json + [("X-Local-Id", "tmp-7f3a")],
                body: #"{"lines":[]}"#
            )
            #expect(create.0 == .accepted, "\(create.2)")
            let createID = QueueTest.json(create.2)["id"] as? String ?? ""
            let items = try await ProcessTests.get(
                "http://127.0.0.1:\(a.publicPort)/api/orders/tmp-7f3a/items",
                method: .PUT,
                headers: json,
                body: #"[{"sku":"A-1"}]"#
            )
            // The payment's route is concurrent: b asks the database, and queues it behind the create.
            let payment = try await ProcessTests.get(
                "http://127.0.0.1:\(b.publicPort)/api/payments",
                method: .POST,
                headers: json,
                body: #"{"order":"tmp-7f3a"}"#
            )
            for reply in [items, payment] {
                #expect(reply.0 == .accepted, "\(reply.2)")
                #expect(QueueTest.json(reply.2)["waitsFor"] as? [String] == [createID], "\(reply.2)")
            }

            // Only c is left; its next attempt at the create is held by the backend, and c dies holding it.
            await shutDownInProcess()
            mode.withLock { $0 = .holding }
            try await waitUntil(timeout: .seconds(10)) { origin.inFlight >= 1 }
            c.signal(SIGKILL)
            _ = try await c.waitForExit()

            // The backend is back; two new replicas take over once c's lease has run out.
            mode.withLock { $0 = .up }
            inProcess = [
                try await Self.startReplica("a2", origin: origin, store: store),
                try await Self.startReplica("b2", origin: origin, store: store),
            ]
            let admin = "http://127.0.0.1:\(inProcess[0].adminPort)"
            try await waitUntil(timeout: .seconds(40)) {
                try await ProcessTests.get(admin + "/queue").2.hasPrefix(#"{"depth":0,"#)
            }
            let answered = origin.requests.filter { (200..<300).contains(Int($0.status.code)) }
            #expect(answered.map(\.uri).first == "/api/orders")
            #expect(answered.map(\.uri).sorted() == ["/api/orders", "/api/orders/R1/items", "/api/payments"])
            #expect(answered.first { $0.uri == "/api/payments" }.map { String(buffer: $0.body) } == #"{"order":"R1"}"#)
            // Nothing but the create ever carried the local identifier to the backend.
            for request in origin.requests where request.uri != "/api/orders" {
                #expect(!request.uri.contains("tmp-7f3a") && !String(buffer: request.body).contains("tmp-7f3a"))
            }
            let mapping = try await ProcessTests.get(admin + "/queue/identifiers/tmp-7f3a").2
            #expect(mapping.contains(#""remoteId":"R1""#), "\(mapping)")
        } catch {
            gate.open()
            await shutDownInProcess()
            try? await origin.stop()
            throw error
        }
        gate.open()
        await shutDownInProcess()
        try await origin.stop()
    }
}
