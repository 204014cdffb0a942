import Logging
import PostgresNIO
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The shared schema, migrated on a real PostgreSQL server, each test in a database of its own.
@Suite(
    "the cluster schema: numbered migrations, run once however many replicas start together",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer
)
struct ClusterSchemaTests {
    private let logger = PostgresTestServer.logger

    /// The tables of the public schema whose names start with `sdui_`, sorted.
    private func tables(_ client: PostgresClient) async throws -> [String] {
        var names: [String] = []
        let rows = try await client.query(
            """
            SELECT table_name::text FROM information_schema.tables
            WHERE table_schema = 'public' AND table_name LIKE 'sdui\\_%' ORDER BY table_name
            """
        )
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }

    /// The recorded migrations: version and when it ran, by version.
    private func recorded(_ client: PostgresClient) async throws -> [Int32: Double] {
        var versions: [Int32: Double] = [:]
        let rows = try await client.query(
            "SELECT version, extract(epoch FROM applied_at)::float8 FROM sdui_schema_migrations"
        )
        for try await (version, appliedAt) in rows.decode((Int32, Double).self) { versions[version] = appliedAt }
        return versions
    }

    @Test("three replicas migrating at once all succeed, and the tables exist once")
    func concurrentMigrationsRunOnce() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let logger = self.logger
        try await withThrowingTaskGroup(of: Void.self) { group in
            for replica in 0..<3 {
                group.addTask {
                    try await server.withClient(url, applicationName: "replica-\(replica)") { client in
                        try await ClusterSchema.migrate(client, logger: logger)
                    }
                }
            }
            try await group.waitForAll()
        }
        try await server.withClient(url) { client in
            #expect(
                try await tables(client) == [
                    "sdui_fleet_log_state", "sdui_invalidation_log", "sdui_queue", "sdui_queue_state", "sdui_replicas",
                    "sdui_schema_migrations",
                ]
            )
            #expect(try await recorded(client).keys.sorted() == Array(1...Int32(ClusterSchema.migrations.count)))
            try await client.query(
                "INSERT INTO sdui_invalidation_log (kind, value, replica) VALUES ('prefix', '/screens', 'a')"
            )
            var soft: [Bool] = []
            for try await value in try await client.query("SELECT soft FROM sdui_invalidation_log").decode(Bool.self) {
                soft.append(value)
            }
            #expect(soft == [false])
        }
    }

    @Test("migrating an up-to-date database changes nothing")
    func migratingAgainIsANoOp() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        try await server.withClient(url) { client in
            try await ClusterSchema.migrate(client, logger: logger)
            let before = try await recorded(client)
            try await client.query(
                "INSERT INTO sdui_replicas (name, applied_id) VALUES ('kept', 7)"
            )
            try await ClusterSchema.migrate(client, logger: logger)
            #expect(try await recorded(client) == before)
            var applied: [Int64] = []
            for try await id in try await client.query("SELECT applied_id FROM sdui_replicas").decode(Int64.self) {
                applied.append(id)
            }
            #expect(applied == [7])
        }
    }

    @Test("a migration appended later runs on a database at the earlier version")
    func anAppendedMigrationRuns() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let next = ClusterSchema.Migration(
            version: Int32(ClusterSchema.migrations.count + 1),
            summary: "a table for the test",
            statements: ["CREATE TABLE sdui_later (id int)"]
        )
        try await server.withClient(url) { client in
            try await ClusterSchema.migrate(client, logger: logger)
            try await ClusterSchema.migrate(client, migrations: ClusterSchema.migrations + [next], logger: logger)
            #expect(try await recorded(client).keys.sorted() == Array(1...next.version))
            #expect(try await tables(client).contains("sdui_later"))
        }
    }

    @Test("a database of the first version (the fleet log only) gains the shared write queue")
    func theQueueTablesAreAddedToAFirstVersionDatabase() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        try await server.withClient(url) { client in
            try await ClusterSchema.migrate(
                client,
                migrations: Array(ClusterSchema.migrations.prefix(1)),
                logger: logger
            )
            #expect(try await !tables(client).contains("sdui_queue"))
            try await ClusterSchema.migrate(client, logger: logger)
            #expect(try await recorded(client).keys.sorted() == Array(1...Int32(ClusterSchema.migrations.count)))
            #expect(try await Set(tables(client)).isSuperset(of: ["sdui_queue", "sdui_queue_state"]))
        }
    }

    @Test("a database migrated by a newer binary is refused with a message saying so")
    func aNewerSchemaIsRefused() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        try await server.withClient(url) { client in
            try await ClusterSchema.migrate(client, logger: logger)
            try await client.query("INSERT INTO sdui_schema_migrations (version) VALUES (99)")
            let error = await #expect(throws: ClusterSchemaError.self) {
                try await ClusterSchema.migrate(client, logger: logger)
            }
            #expect(error?.description.contains("version 99") == true)
            #expect(error?.description.contains("newer sdui-proxy") == true)
        }
    }

    @Test("a failing migration leaves nothing behind")
    func aFailingMigrationIsRolledBack() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        let broken = ClusterSchema.Migration(
            version: Int32(ClusterSchema.migrations.count + 1),
            summary: "fails half way",
            statements: ["CREATE TABLE sdui_half (id int)", "CREATE TABLE sdui_half (id int)"]
        )
        try await server.withClient(url) { client in
            await #expect(throws: PSQLError.self) {
                try await ClusterSchema.migrate(client, migrations: ClusterSchema.migrations + [broken], logger: logger)
            }
            let left = try await tables(client)
            #expect(left == [])
        }
    }
}
