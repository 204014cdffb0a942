import AsyncHTTPClient
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

/// The write queue shared through PostgreSQL by whole proxies: two in this process, one a process of its own that
/// is killed with SIGKILL in the middle of a delivery.
@Suite(
    "a fleet's write queue: any replica accepts, any delivers, and a replica killed mid-delivery loses nothing",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer,
    .serialized
)
struct FleetQueueTests {
    /// How the origin answers writes.
    enum Mode {
        /// Down: 503, retried.
        case down
        /// The next write is held (until the test ends), then answered 503.
        case holding
        /// Up: 201.
        case up
    }

    /// The `queue.store` text for `url`, password included.
    private static func storeText(_ url: PostgresURL) -> String {
        "postgres://\(url.user):\(url.password ?? "")@\(url.host):\(url.port)/\(url.database)"
    }

    private static func queueConfiguration(store: String) -> QueueConfiguration {
        var queue = QueueConfiguration()
        queue.store = store
        // Leases and timeouts of seconds: a renewal a loaded machine delays by a second must not hand a head to
        // another replica, nor a delivery the backend holds time out, or a write would be sent twice.
        queue.leaseTimeout = .seconds(8)
        var route = QueueConfiguration.Route(method: "POST", pathPrefix: "/api/orders", ordering: .sequential)
        route.retry.maxAttempts = 1000
        route.retry.backoff = .milliseconds(50)
        route.retry.maxBackoff = .milliseconds(200)
        queue.routes = [route]
        return queue
    }

    private static func startReplica(
        _ name: String,
        origin: TestOrigin,
        store: String,
        tune: (inout QueueConfiguration) -> Void = { _ in }
    ) async throws -> ProxyServer {
        var configuration = ProxyHarness.testConfiguration(upstream: origin.url)
        configuration.cluster.replicaName = name
        // Shorter than the lease, as a shared queue requires.
        configuration.upstream.timeout = .seconds(5)
        var queue = queueConfiguration(store: store)
        tune(&queue)
        configuration.queue = queue
        return try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
    }

    @Test(
        "writes spread over three replicas while the backend is down are delivered once each, in order, after a kill -9"
    )
    func killedReplicaLosesNothing() async throws {
        let server = try #require(PostgresTestServer.current)
        let store = Self.storeText(try await server.makeDatabase())
        let mode = Mutex(Mode.down)
        let gate = OriginGate()
        let origin = try await TestOrigin { _ in
            switch mode.withLock({ $0 }) {
            case .down: TestOrigin.Response(status: .serviceUnavailable, body: "{}")
            case .holding: TestOrigin.Response(status: .serviceUnavailable, body: "{}", heldBy: gate)
            case .up: TestOrigin.Response(status: .created, body: "{}")
            }
        }
        let directory = NSTemporaryDirectory() + "sdui-fleet-queue-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/replica-c.yaml"
        try """
        upstream: { url: "\(origin.url)", timeout: 5s }
        cluster: { replicaName: c }
        queue:
          store: "\(store)"
          leaseTimeout: 8s
          routes:
            - { match: POST /api/orders, ordering: sequential, retry: { maxAttempts: 1000, backoff: 50ms, maxBackoff: 200ms } }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        #expect(chmod(config, 0o600) == 0)

        var inProcess: [ProxyServer] = []
        func shutDownInProcess() async {
            for replica in inProcess { await replica.shutdown(drainTimeout: .seconds(1)) }
            inProcess = []
        }
        do {
            let c = try await ProcessTests.RunningProxy(arguments: ["--config", config])
            inProcess = [
                try await Self.startReplica("a", origin: origin, store: store),
                try await Self.startReplica("b", origin: origin, store: store),
            ]
            let publicPorts = inProcess.map(\.publicPort) + [c.publicPort]

            // The backend is down: each write, through the replicas in turn, is accepted into the shared queue.
            var ids: [String] = []
            for number in 0..<12 {
                let port = publicPorts[number % 3]
                let reply = try await ProcessTests.get(
                    "http://127.0.0.1:\(port)/api/orders",
                    method: .POST,
                    headers: [("Content-Type", "application/json")],
                    body: #"{"n":\#(number)}"#
                )
                #expect(reply.0 == .accepted, "write \(number) through port \(port): \(reply.2)")
                ids.append(
                    String(reply.1.first(name: "location")?.dropFirst(RequestRouter.queueStatusPrefix.count) ?? "")
                )
            }
            // Every replica answers the same about the queue.
            for port in inProcess.map(\.adminPort) + [c.adminPort] {
                #expect(try await ProcessTests.get("http://127.0.0.1:\(port)/queue").2.contains(#""depth":12"#))
                #expect(
                    try await ProcessTests.get("http://127.0.0.1:\(port)/queue/\(ids[5])").2.contains(
                        #""state":"pending""#
                    )
                )
            }

            // Only c is left; its next attempt at the head is held by the backend, and c dies holding it.
            await shutDownInProcess()
            mode.withLock { $0 = .holding }
            try await waitUntil(timeout: .seconds(10)) { origin.inFlight >= 1 }
            c.signal(SIGKILL)
            _ = try await c.waitForExit()

            // The backend is back, and two new replicas take over once c's lease has run out.
            mode.withLock { $0 = .up }
            inProcess = [
                try await Self.startReplica("a2", origin: origin, store: store),
                try await Self.startReplica("b2", origin: origin, store: store),
            ]
            let admin = inProcess.map { "http://127.0.0.1:\($0.adminPort)" }
            try await waitUntil(timeout: .seconds(30)) {
                try await ProcessTests.get(admin[0] + "/queue").2.contains(#""depth":0"#)
            }

            let delivered = origin.requests.filter { $0.uri == "/api/orders" && $0.status == .created }
            #expect(delivered.compactMap { $0.headers.first(name: "idempotency-key") } == ids)
            #expect(delivered.map { String(buffer: $0.body) } == (0..<12).map { #"{"n":\#($0)}"# })
            for base in admin {
                for id in ids {
                    #expect(try await ProcessTests.get(base + "/queue/\(id)").2.contains(#""state":"delivered""#))
                }
            }
            // One of the new replicas took the head over from c's expired lease (and sent it with the same key, as
            // the keys above show); nothing else was leased.
            var expiries = 0
            for base in admin {
                let metrics = try await ProcessTests.get(base + "/metrics").2
                let line = metrics.split(separator: "\n").first { $0.hasPrefix("sdui_queue_lease_expiries_total ") }
                expiries += line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
            }
            #expect(expiries == 1)
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

    @Test("a write accepted by one replica is followed on another's public listener, at the 202's Location")
    func publicStatusOnAnyReplica() async throws {
        let server = try #require(PostgresTestServer.current)
        let store = Self.storeText(try await server.makeDatabase())
        let origin = try await TestOrigin { _ in TestOrigin.Response(status: .serviceUnavailable, body: "{}") }
        var replicas: [ProxyServer] = []
        do {
            for name in ["a", "b"] { replicas.append(try await Self.startReplica(name, origin: origin, store: store)) }
            let accepted = try await ProcessTests.get(
                "http://127.0.0.1:\(replicas[0].publicPort)/api/orders",
                method: .POST,
                headers: [("Authorization", "Bearer s3cret")],
                body: #"{"n":1}"#
            )
            #expect(accepted.0 == .accepted)
            let location = try #require(accepted.1.first(name: "location"))
            #expect(location.hasPrefix(RequestRouter.queueStatusPrefix))
            let status = try await ProcessTests.get("http://127.0.0.1:\(replicas[1].publicPort)" + location)
            #expect(status.0 == .ok)
            #expect(status.2.contains(#""state":"pending""#), "\(status.2)")
            #expect(!status.2.contains("s3cret") && !status.2.contains("/api/orders"), "\(status.2)")
            let unknown = RequestRouter.queueStatusPrefix + String(repeating: "f", count: 32)
            #expect(try await ProcessTests.get("http://127.0.0.1:\(replicas[1].publicPort)" + unknown).0 == .notFound)
        } catch {
            for replica in replicas { await replica.shutdown(drainTimeout: .seconds(1)) }
            try? await origin.stop()
            throw error
        }
        for replica in replicas { await replica.shutdown(drainTimeout: .seconds(1)) }
        try await origin.stop()
    }

    @Test("a concurrent route's backlog is delivered by every replica at once, each write once")
    func concurrentRouteSpreadsOverReplicas() async throws {
        let server = try #require(PostgresTestServer.current)
        let store = Self.storeText(try await server.makeDatabase())
        let up = Atomic(false)
        let gate = OriginGate()
        let origin = try await TestOrigin { _ in
            up.load(ordering: .relaxed)
                ? TestOrigin.Response(status: .created, body: "{}", heldBy: gate)
                : TestOrigin.Response(status: .serviceUnavailable, body: "{}")
        }
        var replicas: [ProxyServer] = []
        do {
            for name in ["a", "b", "c"] {
                replicas.append(
                    try await Self.startReplica(name, origin: origin, store: store) { queue in
                        queue.routes[0].ordering = .concurrent
                        queue.routes[0].retry.backoff = .milliseconds(200)
                        queue.routes[0].retry.maxBackoff = .milliseconds(400)
                        queue.concurrency = 2
                    }
                )
            }
            var ids: [String] = []
            for number in 0..<12 {
                let reply = try await ProcessTests.get(
                    "http://127.0.0.1:\(replicas[number % 3].publicPort)/api/orders",
                    method: .POST,
                    body: #"{"n":\#(number)}"#
                )
                #expect(reply.0 == .accepted)
                ids.append(
                    String(reply.1.first(name: "location")?.dropFirst(RequestRouter.queueStatusPrefix.count) ?? "")
                )
            }
            // Back, but holding every answer: the deliveries pile up at the backend, two per replica at most.
            up.store(true, ordering: .relaxed)
            try await waitUntil(timeout: .seconds(10)) { origin.inFlight >= 6 }
            #expect(origin.inFlight == 6)
            gate.open()
            let admin = "http://127.0.0.1:\(replicas[0].adminPort)"
            try await waitUntil(timeout: .seconds(30)) {
                try await ProcessTests.get(admin + "/queue").2.contains(#""depth":0"#)
            }
            let delivered = origin.requests.filter { $0.status == .created }
            #expect(delivered.compactMap { $0.headers.first(name: "idempotency-key") }.sorted() == ids.sorted())
        } catch {
            gate.open()
            for replica in replicas { await replica.shutdown(drainTimeout: .seconds(1)) }
            try? await origin.stop()
            throw error
        }
        for replica in replicas { await replica.shutdown(drainTimeout: .seconds(1)) }
        try await origin.stop()
    }

    @Test(
        "writes sent at once through three replicas on an idle sequential route: one at a time at the backend, in acceptance order"
    )
    func sequentialOrderIsTheDatabases() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let store = Self.storeText(url)
        // Slow enough that two deliveries in flight at once would overlap at the backend.
        let origin = try await TestOrigin { _ in
            TestOrigin.Response(status: .created, body: "{}", delay: .milliseconds(30))
        }
        var replicas: [ProxyServer] = []
        do {
            for name in ["a", "b", "c"] {
                replicas.append(try await Self.startReplica(name, origin: origin, store: store))
            }
            let ports = replicas.map(\.publicPort)
            let accepted = try await withThrowingTaskGroup(of: HTTPResponseStatus.self) { group in
                for number in 0..<15 {
                    group.addTask {
                        try await ProcessTests.get(
                            "http://127.0.0.1:\(ports[number % 3])/api/orders",
                            method: .POST,
                            body: #"{"n":\#(number)}"#
                        ).0
                    }
                }
                return try await group.reduce(into: [HTTPResponseStatus]()) { $0.append($1) }
            }
            // In a fleet a sequential route's writes are queued, so that the database orders them.
            #expect(accepted == Array(repeating: .accepted, count: 15))
            let admin = "http://127.0.0.1:\(replicas[0].adminPort)"
            try await waitUntil(timeout: .seconds(30)) {
                try await ProcessTests.get(admin + "/queue").2.contains(#""depth":0"#)
            }
            #expect(origin.maxInFlight == 1)
            let acceptanceOrder = try await server.withClient(url) { client in
                var ids: [String] = []
                for try await id in try await client.query("SELECT id FROM sdui_queue ORDER BY seq").decode(String.self)
                {
                    ids.append(id)
                }
                return ids
            }
            let delivered = origin.requests.filter { $0.status == .created }
            #expect(delivered.compactMap { $0.headers.first(name: "idempotency-key") } == acceptanceOrder)
            #expect(acceptanceOrder.count == 15)
        } catch {
            for replica in replicas { await replica.shutdown(drainTimeout: .seconds(1)) }
            try? await origin.stop()
            throw error
        }
        for replica in replicas { await replica.shutdown(drainTimeout: .seconds(1)) }
        try await origin.stop()
    }
}
