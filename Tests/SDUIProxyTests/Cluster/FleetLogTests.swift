import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import PostgresNIO
import SDUIProxyCore
import ServiceLifecycle
import Testing

@testable import SDUIProxy

/// Replicas of the fleet, each a ``FleetLog`` that records what it applies, over a real PostgreSQL server.
@Suite(
    "the fleet's log: every replica applies every other replica's invalidations, through PostgreSQL",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer,
    // One at a time: each starts replicas of its own, and together they would crowd the timing-sensitive
    // suites that run beside them on a two-core machine.
    .serialized
)
struct FleetLogTests {
    /// One replica: its log, and what that log applied here, in order.
    final class Replica: Sendable {
        let name: String
        /// Its connection's `application_name`, unique to this test's replica, so a test ends only its own.
        let applicationName: String
        let log: FleetLog
        private let applied = NIOLockedValueBox<[FleetLogEntry.Payload]>([])
        private let running = NIOLockedValueBox<Task<Void, any Error>?>(nil)
        private let group: ServiceGroup?

        /// With `underServiceGroup`, the log runs in a `ServiceGroup` and ``stop()`` shuts it down gracefully, as
        /// the proxy does; otherwise ``stop()`` cancels it.
        init(
            name: String,
            url: PostgresURL,
            underServiceGroup: Bool,
            tune: (inout FleetLog.Settings) -> Void
        ) throws {
            self.name = name
            applicationName = "fleet-test \(name) \(UUID().uuidString)"
            var settings = FleetLog.Settings(replicaName: name)
            settings.pollInterval = .milliseconds(200)
            settings.heartbeatInterval = .milliseconds(200)
            // A write's answer and a prefetch's count wait for the row to be written, this long at most. The tests
            // check what is recorded, not how soon: a machine running every suite at once has kept a write more than
            // ten seconds, so the bound only keeps a test from hanging. (A test of `pending` stops PostgreSQL, and
            // is answered at once.)
            settings.recordWait = .seconds(60)
            // A query slower than this takes its connection for dead (a half-open one answers nothing, ever), and
            // invalidations made until it is back are `pending`. A machine running every suite beside a build has
            // kept a query more than the proxy's five seconds; these tests see closes as the server makes them.
            settings.queryTimeout = .seconds(60)
            tune(&settings)
            let applied = self.applied
            log = FleetLog(
                configuration: try PostgresConnectionSettings.connectionConfiguration(
                    url,
                    applicationName: applicationName,
                    // A loaded machine's PostgreSQL, shared by every test, can take seconds to let a login in.
                    connectTimeout: .seconds(10)
                ),
                settings: settings,
                appliers: FleetLog.Appliers(
                    invalidate: { invalidation in
                        applied.withLockedValue { $0.append(.invalidation(invalidation)) }
                        return 0
                    },
                    prefetch: { prefetch in applied.withLockedValue { $0.append(.prefetch(prefetch)) } }
                ),
                eventLoop: MultiThreadedEventLoopGroup.singleton.any(),
                logger: PostgresTestServer.logger
            )
            let log = self.log
            if underServiceGroup {
                let group = ServiceGroup(services: [log], logger: PostgresTestServer.logger)
                self.group = group
                running.withLockedValue { $0 = Task { try await group.run() } }
            } else {
                group = nil
                running.withLockedValue { $0 = Task { try await log.run() } }
            }
        }

        var appliedSoFar: [FleetLogEntry.Payload] { applied.withLockedValue { $0 } }

        /// Waits until this replica has applied at least `count` payloads, or `limit` passes; returns what it has.
        func waitForApplied(_ count: Int, upTo limit: Duration = .seconds(10)) async throws -> [FleetLogEntry.Payload] {
            let deadline = ContinuousClock.now + limit
            while appliedSoFar.count < count, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(2))
            }
            return appliedSoFar
        }

        /// Waits until the log's connection is up (or down, with `connected: false`).
        func waitUntil(connected: Bool, upTo limit: Duration = .seconds(30)) async throws {
            let deadline = ContinuousClock.now + limit
            while await log.status.connected != connected, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(await log.status.connected == connected, "\(name) connected should be \(connected)")
        }

        func stop() async {
            let task = running.withLockedValue { $0 }
            if let group {
                await group.triggerGracefulShutdown()
            } else {
                task?.cancel()
            }
            _ = try? await task?.value
        }
    }

    static func replicas(
        _ names: [String],
        url: PostgresURL,
        tune: (String, inout FleetLog.Settings) -> Void = { _, _ in }
    ) async throws -> [Replica] {
        let replicas = try names.map { name in
            try Replica(name: name, url: url, underServiceGroup: false) { tune(name, &$0) }
        }
        for replica in replicas { try await replica.waitUntil(connected: true) }
        return replicas
    }

    /// Two replicas, the second with its listening connection just killed and slow to come back (four seconds,
    /// room for a loaded machine), so what the test does next happens while it is away.
    static func replicasWithSecondAway(url: PostgresURL, server: PostgresTestServer) async throws -> [Replica] {
        let replicas = try await Self.replicas(["a", "b"], url: url) { name, settings in
            if name == "b" { settings.reconnectDelays = (.seconds(4), .seconds(8)) }
        }
        #expect(try await server.terminateConnections(applicationName: replicas[1].applicationName) == 1)
        try await replicas[1].waitUntil(connected: false)
        return replicas
    }

    static func purge(_ scope: CacheInvalidation.Scope, soft: Bool = false) -> FleetLogEntry.Payload {
        .invalidation(CacheInvalidation(scope, soft: soft))
    }

    @Test("each kind of invalidation made on one replica is applied, in order, by every other, and not again by it")
    func fanOutByKind() async throws {
        let server = try #require(PostgresTestServer.current)
        let replicas = try await Self.replicas(["a", "b", "c"], url: try await server.makeDatabase())
        let invalidations: [CacheInvalidation] = [
            CacheInvalidation(.targets(["/screens/home", "/search?q=a&page=2"])),
            CacheInvalidation(.prefix("/screens/")),
            CacheInvalidation(.tag("products")),
            CacheInvalidation(.prefix("/cart"), soft: true),
            CacheInvalidation(.all),
        ]
        var latencies: [Duration] = []
        for (index, invalidation) in invalidations.enumerated() {
            #expect(await replicas[0].log.invalidated(invalidation) == .recorded)
            let answered = ContinuousClock.now
            _ = try await replicas[1].waitForApplied(index + 1)
            latencies.append(ContinuousClock.now - answered)
        }
        let expected = invalidations.map(FleetLogEntry.Payload.invalidation)
        #expect(try await replicas[1].waitForApplied(5) == expected)
        #expect(try await replicas[2].waitForApplied(5) == expected)
        // Its own rows were applied when made: reading past them, the first replica applies nothing.
        let status = await replicas[0].log.status
        #expect(replicas[0].appliedSoFar.isEmpty)
        #expect(status.pending == 0)
        #expect(latencies.allSatisfy { $0 < .seconds(10) })
        for replica in replicas { await replica.stop() }
    }

    @Test("invalidations made without waiting are written in the order they were made")
    func recordKeepsOrder() async throws {
        let server = try #require(PostgresTestServer.current)
        let replicas = try await Self.replicas(["a", "b"], url: try await server.makeDatabase())
        let made = (0..<50).map { CacheInvalidation(.targets(["/screens/\($0)"])) }
        for invalidation in made { replicas[0].log.record(invalidation) }
        #expect(try await replicas[1].waitForApplied(50) == made.map(FleetLogEntry.Payload.invalidation))
        for replica in replicas { await replica.stop() }
    }

    @Test("a replica shutting down writes the invalidations made just before, for the others")
    func shutdownWritesWhatIsLeft() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let leaving = try Replica(name: "leaving", url: url, underServiceGroup: true) { _ in }
        let staying = try await Self.replicas(["staying"], url: url)[0]
        try await leaving.waitUntil(connected: true)
        let made = (0..<5).map { CacheInvalidation(.targets(["/screens/last-\($0)"])) }
        for invalidation in made { leaving.log.record(invalidation) }
        await leaving.stop()
        #expect(try await staying.waitForApplied(5) == made.map(FleetLogEntry.Payload.invalidation))
        await staying.stop()
    }

    @Test("a replica whose listening connection is killed reconnects and catches up from its cursor")
    func catchUpAfterTerminate() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let replicas = try await Self.replicasWithSecondAway(url: url, server: server)
        let invalidation = CacheInvalidation(.tag("promo"))
        #expect(await replicas[0].log.invalidated(invalidation) == .recorded)
        try await replicas[1].waitUntil(connected: true)
        #expect(try await replicas[1].waitForApplied(1) == [.invalidation(invalidation)])
        for replica in replicas { await replica.stop() }
    }

    @Test("a row of a kind this version does not know empties the cache")
    func unknownKind() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let replicas = try await Self.replicas(["a"], url: url)
        try await server.withConnection(url) { connection in
            try await connection.query(
                """
                INSERT INTO sdui_invalidation_log (kind, value, soft, replica)
                VALUES ('surrogate-key', 'x', false, 'newer')
                """,
                logger: PostgresTestServer.logger
            )
            try await connection.query("SELECT pg_notify('sdui_fleet_log', '')", logger: PostgresTestServer.logger)
        }
        #expect(try await replicas[0].waitForApplied(1) == [Self.purge(.all)])
        for replica in replicas { await replica.stop() }
    }

    @Test("a replica away longer than the log keeps its rows empties its cache when it is back")
    func fellBehindRetention() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let replicas = try await Self.replicasWithSecondAway(url: url, server: server)
        #expect(await replicas[0].log.invalidated(CacheInvalidation(.tag("gone"))) == .recorded)
        // The log prunes that row before the second replica is back.
        try await server.withConnection(url) { connection in
            try await connection.query(
                """
                WITH deleted AS (DELETE FROM sdui_invalidation_log RETURNING id)
                UPDATE sdui_fleet_log_state SET pruned_through = (SELECT max(id) FROM deleted)
                """,
                logger: PostgresTestServer.logger
            )
        }
        try await replicas[1].waitUntil(connected: true)
        #expect(try await replicas[1].waitForApplied(1) == [Self.purge(.all)])
        for replica in replicas { await replica.stop() }
    }

    @Test("rows older than the retention are pruned, and how far is recorded")
    func prunes() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let replicas = try await Self.replicas(["a"], url: url) { _, settings in
            settings.retention = .milliseconds(50)
            settings.pruneInterval = .milliseconds(200)
        }
        for index in 0..<3 {
            #expect(await replicas[0].log.invalidated(CacheInvalidation(.tag("t\(index)"))) == .recorded)
        }
        let deadline = ContinuousClock.now + .seconds(10)
        var state: (rows: Int, pruned: Int64) = (-1, -1)
        while ContinuousClock.now < deadline {
            state = try await server.withConnection(url) { connection in
                let rows = try await connection.query(
                    """
                    SELECT (SELECT count(*)::int FROM sdui_invalidation_log), pruned_through FROM sdui_fleet_log_state
                    """,
                    logger: PostgresTestServer.logger
                )
                for try await row in rows.decode((Int, Int64).self) { return row }
                return (-1, -1)
            }
            if state.rows == 0 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(state.rows == 0)
        #expect(state.pruned >= 3)
        for replica in replicas { await replica.stop() }
    }

    @Test("a fleet prefetch runs on every other replica, and the answer says how many took it")
    func fleetPrefetch() async throws {
        let server = try #require(PostgresTestServer.current)
        let replicas = try await Self.replicas(["a", "b", "c"], url: try await server.makeDatabase())
        // Every replica has said it is alive once.
        let deadline = ContinuousClock.now + .seconds(10)
        while await replicas[0].log.status.replicas.count < 3, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let prefetch = FleetPrefetch(urls: ["/screens/home"], platforms: ["ios"], followActions: 1)
        let answer = await replicas[0].log.prefetched(prefetch)
        #expect(answer.fanOut == .recorded)
        #expect(answer.replicas == 3)
        #expect(answer.took == 3)
        #expect(try await replicas[1].waitForApplied(1) == [.prefetch(prefetch)])
        #expect(try await replicas[2].waitForApplied(1) == [.prefetch(prefetch)])
        #expect(replicas[0].appliedSoFar.isEmpty)
        for replica in replicas { await replica.stop() }
    }

    @Test(
        "once a replica's log has stopped, an invalidation made there is answered pending at once, not waited on",
        // The limit also covers making the database and the replica's first login, which a loaded machine has kept
        // waiting for most of a minute: five minutes leave room for that and are still far below the hour waited on.
        .timeLimit(.minutes(5))
    )
    func anInvalidationAfterStopIsPending() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let replicas = try await Self.replicas(["a"], url: url) { _, settings in
            // Were it waited on, the test's time limit would end it first.
            settings.recordWait = .seconds(3600)
        }
        await replicas[0].stop()
        #expect(await replicas[0].log.invalidated(CacheInvalidation(.prefix("/screens/"))) == .pending)
        #expect(await replicas[0].log.runningWorkCount == 0)
    }

    /// Its own server: it is stopped and started again.
    @Test("with PostgreSQL down a replica keeps invalidating here, says pending, and writes it all once it is back")
    func postgresDownAndBack() async throws {
        let server = try await PostgresTestServer.start()
        let url = try await server.makeDatabase()
        let replicas = try await Self.replicas(["a", "b"], url: url)
        try await server.stop()
        try await replicas[0].waitUntil(connected: false)
        let made = [CacheInvalidation(.prefix("/screens/")), CacheInvalidation(.tag("x"), soft: true)]
        for invalidation in made { #expect(await replicas[0].log.invalidated(invalidation) == .pending) }
        #expect(await replicas[0].log.status.pending == 2)
        try await server.start()
        try await replicas[0].waitUntil(connected: true)
        #expect(try await replicas[1].waitForApplied(2) == made.map(FleetLogEntry.Payload.invalidation))
        // The other replica may read the rows before this one has taken in that its writes were committed.
        let deadline = ContinuousClock.now + .seconds(10)
        while await replicas[0].log.status.pending != 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(await replicas[0].log.status.pending == 0)
        for replica in replicas { await replica.stop() }
        await server.shutdown()
    }
}
