import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresNIO
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A replica whose PostgreSQL cannot be reached from its start: it serves, stays healthy and ready, and applies its
/// invalidations here, keeping them for the fleet.
@Suite("a replica of a fleet whose PostgreSQL is unreachable keeps serving")
struct FleetWithoutPostgresTests {
    @Test("it serves, stays ready, applies a purge here at once and says the fan-out is pending")
    func servesWithoutPostgres() async throws {
        // A port that refuses connections, as a stopped database does.
        let stopped = try await TestOrigin { _ in .component() }
        try await stopped.stop()
        try await ProxyHarness.run(
            origin: { _ in .component(maxAge: 300) },
            configure: { configuration in
                configuration.cluster.postgres = try? PostgresURL(
                    parsing: "postgres://sdui:not-logged@127.0.0.1:\(stopped.port)/sdui"
                )
                configuration.cluster.replicaName = "alone"
            }
        ) { proxy in
            #expect(try await proxy.get("/screens/a")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/screens/a")["X-Cache"] == "HIT")
            #expect(try await proxy.admin("/health").status == .ok)
            #expect(try await proxy.admin("/ready").status == .ok)

            let purge = try await proxy.admin("/cache?url=/screens/a", method: .DELETE)
            #expect(purge.status == .ok)
            #expect(purge.body == #"{"purged":1,"inFlight":0,"url":"/screens/a","fanOut":"pending"}"#)
            #expect(try await proxy.get("/screens/a")["X-Cache"] == "MISS")

            let cluster = try await proxy.admin("/cluster").body
            #expect(cluster.contains(#""replica":"alone","connected":false"#), "\(cluster)")
            #expect(cluster.contains(#""pending":1"#), "\(cluster)")
        }
    }

    @Test("a shutdown during a connect that hangs starts nothing after: no reconnect outlives the replica")
    func shutdownDuringAConnectStartsNothing() async throws {
        // A PostgreSQL that accepts and never answers: the log's connect is in flight until it is cancelled.
        let accepted = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Void.self)
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { _ in
                accepted.succeed(())
                return MultiThreadedEventLoopGroup.singleton.next().makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        var settings = FleetLog.Settings(replicaName: "leaving")
        // The reconnect a cancelled connect would schedule waits long enough to be seen still there.
        settings.reconnectDelays = (.seconds(3600), .seconds(3600))
        let log = FleetLog(
            configuration: try PostgresConnectionSettings.connectionConfiguration(
                try PostgresURL(parsing: "postgres://sdui:pw@127.0.0.1:\(silent.localAddress!.port!)/sdui"),
                connectTimeout: .seconds(3600)
            ),
            settings: settings,
            appliers: FleetLog.Appliers(invalidate: { _ in 0 }, prefetch: { _ in }),
            eventLoop: MultiThreadedEventLoopGroup.singleton.any(),
            logger: Logger(label: "sdui-proxy.tests.fleet") { _ in SwiftLogNoOpLogHandler() }
        )
        let running = Task { try await log.run() }
        try await accepted.futureResult.get()
        running.cancel()
        try await running.value
        #expect(await log.runningWorkCount == 0)
        try await silent.close()
    }
}
