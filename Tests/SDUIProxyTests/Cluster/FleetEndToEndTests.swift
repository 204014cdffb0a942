import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Three whole proxies in one process, in front of one origin, sharing a real PostgreSQL: what one replica
/// invalidates, the others stop serving.
@Suite(
    "a fleet of three proxies: purges and unsafe methods through one replica reach the others",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer,
    // One at a time: each starts replicas of its own, and together they would crowd the timing-sensitive
    // suites that run beside them on a two-core machine.
    .serialized
)
struct FleetEndToEndTests {
    struct Fleet {
        let origin: TestOrigin
        let servers: [ProxyServer]
        let client: HTTPClient

        func get(_ replica: Int, _ path: String, method: HTTPMethod = .GET) async throws -> ProxyHarness.Reply {
            try await send("http://127.0.0.1:\(servers[replica].publicPort)\(path)", method: method)
        }

        func admin(_ replica: Int, _ path: String, method: HTTPMethod = .GET) async throws -> ProxyHarness.Reply {
            try await send("http://127.0.0.1:\(servers[replica].adminPort)\(path)", method: method)
        }

        private func send(_ url: String, method: HTTPMethod) async throws -> ProxyHarness.Reply {
            var request = HTTPClientRequest(url: url)
            request.method = method
            let response = try await client.execute(request, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 1 << 20)
            return ProxyHarness.Reply(status: response.status, headers: response.headers, body: String(buffer: body))
        }

        /// Waits until `replica` answers `path` with this `X-Cache` (a miss by default), up to `limit`; returns how
        /// long it took, or nil if it never did.
        func waitFor(
            _ replica: Int,
            _ path: String,
            toBe cacheResult: String = "MISS",
            upTo limit: Duration = .seconds(5)
        ) async throws -> Duration? {
            let start = ContinuousClock.now
            while ContinuousClock.now - start < limit {
                if try await get(replica, path)["X-Cache"] == cacheResult { return ContinuousClock.now - start }
                try await Task.sleep(for: .milliseconds(1))
            }
            return nil
        }

        /// Has every replica store `path`: a miss, then a hit.
        func warm(_ path: String) async throws {
            for replica in servers.indices {
                _ = try await get(replica, path)
                #expect(try await get(replica, path)["X-Cache"] == "HIT", "replica \(replica) serves \(path) stored")
            }
        }
    }

    static func withFleet(_ body: (Fleet) async throws -> Void) async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let origin = try await TestOrigin { _ in .component(maxAge: 300) }
        var servers: [ProxyServer] = []
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            for name in ["a", "b", "c"] {
                var configuration = ProxyHarness.testConfiguration(upstream: origin.url)
                configuration.cluster.postgres = url
                configuration.cluster.replicaName = name
                // A purge's answer says "recorded" once PostgreSQL has the row; a loaded machine's may take more
                // than the two seconds a deployment waits (within the ten the test's client waits for an answer).
                var tuning = ProxyServer.Tuning()
                tuning.fleetRecordWait = .seconds(8)
                // Closes are seen as the server makes them; a slow query on a loaded machine is not a dead one.
                tuning.fleetQueryTimeout = .seconds(60)
                servers.append(
                    try await ProxyServer.start(
                        configuration: configuration,
                        logger: ProxyHarness.logger,
                        adminAuthorization: AdminAuthorization(token: nil),
                        eventLoopGroup: nil,
                        tuning: tuning
                    )
                )
            }
            let fleet = Fleet(origin: origin, servers: servers, client: client)
            // Every replica is connected to the log, and has said so in it (a loaded machine's PostgreSQL can take
            // seconds to let each login in).
            let deadline = ContinuousClock.now + .seconds(30)
            for replica in servers.indices {
                while ContinuousClock.now < deadline,
                    !(try await fleet.admin(replica, "/cluster").body.contains(#""connected":true"#))
                {
                    try await Task.sleep(for: .milliseconds(10))
                }
            }
            try await body(fleet)
        } catch {
            try? await client.shutdown()
            for server in servers { await server.shutdown(drainTimeout: .seconds(1)) }
            try? await origin.stop()
            throw error
        }
        try await client.shutdown()
        for server in servers { await server.shutdown(drainTimeout: .seconds(1)) }
        try await origin.stop()
    }

    @Test("a purge on one replica is answered once recorded, and the others' next requests after it are misses")
    func purgeReachesEveryReplica() async throws {
        try await Self.withFleet { fleet in
            for (index, purge) in ["url=/screens/home", "prefix=/screens", "", "url=/screens/home&soft=true"]
                .enumerated()
            {
                try await fleet.warm("/screens/home")
                let origin = index % 3
                let answer = try await fleet.admin(
                    origin,
                    "/cache" + (purge.isEmpty ? "" : "?" + purge),
                    method: .DELETE
                )
                #expect(answer.status == .ok)
                #expect(answer.body.contains(#""fanOut":"recorded""#), "\(answer.body)")
                // Soft: stale, not gone; without validators or stale-while-revalidate it is fetched again in full,
                // which is a miss too.
                for replica in fleet.servers.indices where replica != origin {
                    #expect(try await fleet.waitFor(replica, "/screens/home") != nil, "replica \(replica), \(purge)")
                }
            }
        }
    }

    @Test("a successful POST through one replica invalidates its target on the others")
    func unsafeMethodReachesEveryReplica() async throws {
        try await Self.withFleet { fleet in
            try await fleet.warm("/screens/cart")
            #expect(try await fleet.get(1, "/screens/cart", method: .POST).status == .ok)
            #expect(try await fleet.waitFor(0, "/screens/cart") != nil)
            #expect(try await fleet.waitFor(2, "/screens/cart") != nil)
            let cluster = try await fleet.admin(0, "/cluster").body
            for name in ["a", "b", "c"] { #expect(cluster.contains(#""name":"\#(name)""#), "\(cluster)") }
        }
    }

    @Test("a purge made on one replica voids a fill in flight on another: its answer is not stored there")
    func purgeVoidsAFillInFlightElsewhere() async throws {
        try await Self.withFleet { fleet in
            let gate = OriginGate()
            let isFirst = NIOLockedValueBox(true)
            fleet.origin.setResponder { request in
                guard request.uri == "/screens/slow" else { return .component(maxAge: 300) }
                let first = isFirst.withLockedValue { value in
                    defer { value = false }
                    return value
                }
                return .component(maxAge: 300, extra: #","v":\#(first ? 1 : 2)"#, heldBy: first ? gate : nil)
            }
            async let held = fleet.get(1, "/screens/slow")
            try await waitUntil { fleet.origin.requests(to: "/screens/slow").count == 1 }
            let purge = try await fleet.admin(0, "/cache?url=/screens/slow", method: .DELETE)
            #expect(purge.body.contains(#""fanOut":"recorded""#), "\(purge.body)")
            let applied = #"sdui_fleet_invalidations_applied_total{kind="targets"} 1"#
            try await waitUntil { try await fleet.admin(1, "/metrics").body.contains(applied) }
            gate.open()
            let answer = try await held
            #expect(answer.body.contains(#""v":1"#))
            #expect(answer["Cache-Status"]?.hasSuffix("; detail=invalidated") == true, "\(answer.headers)")
            let next = try await fleet.get(1, "/screens/slow")
            #expect(next["X-Cache"] == "MISS")
            #expect(next.body.contains(#""v":2"#))
        }
    }
}
