import Logging
import PostgresNIO

/// The tables the replicas share, brought up to date when a replica starts.
///
/// Migrations are numbered from 1 and never change once released; a new one is appended to ``migrations``.
/// ``migrate(_:logger:)`` runs the missing ones in one transaction that first takes a transaction-scoped
/// advisory lock, so replicas starting together run each migration once, one after the other, and
/// `sdui_schema_migrations` records which ran.
public enum ClusterSchema {
    /// One step of the schema.
    public struct Migration: Sendable {
        /// Its number: one more than the migration before it.
        public var version: Int32
        /// What it does, for the log.
        public var summary: String
        /// Its statements, run in order (one statement each: the extended protocol takes no more).
        public var statements: [String]

        public init(version: Int32, summary: String, statements: [String]) {
            self.version = version
            self.summary = summary
            self.statements = statements
        }
    }

    /// The key of the advisory lock held while migrating: "SDUIPRXY" in ASCII, fixed for every version.
    public static let advisoryLockKey: Int64 = 0x5344_5549_5052_5859

    /// Every migration this binary knows, in order.
    public static let migrations: [Migration] = [
        Migration(
            version: 1,
            summary: "the invalidation log and the replicas' progress through it",
            statements: [
                """
                CREATE TABLE sdui_invalidation_log (
                  id bigserial PRIMARY KEY,
                  kind text NOT NULL,
                  value text NOT NULL,
                  soft boolean NOT NULL DEFAULT false,
                  replica text NOT NULL,
                  created_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                """
                CREATE TABLE sdui_replicas (
                  name text PRIMARY KEY,
                  applied_id bigint NOT NULL,
                  last_seen timestamptz NOT NULL DEFAULT now()
                )
                """,
                // One row: the highest id pruned from the log, so a replica can tell it missed rows.
                """
                CREATE TABLE sdui_fleet_log_state (
                  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                  pruned_through bigint NOT NULL DEFAULT 0
                )
                """,
                "INSERT INTO sdui_fleet_log_state DEFAULT VALUES",
            ]
        ),
        Migration(
            version: 2,
            summary: "the shared write queue",
            statements: [
                // Times are milliseconds since the epoch, as in the SQLite store. Leases are on the database's
                // clock; next attempts on the clock of the replica that set them.
                """
                CREATE TABLE sdui_queue (
                  seq bigserial PRIMARY KEY,
                  id text NOT NULL UNIQUE,
                  route text NOT NULL,
                  method text NOT NULL,
                  target text NOT NULL,
                  headers bytea,
                  body bytea,
                  enqueued_at bigint NOT NULL,
                  state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
                  attempts integer NOT NULL DEFAULT 0,
                  next_attempt_at bigint NOT NULL,
                  last_error text,
                  status integer,
                  finished_at bigint,
                  finished_by text,
                  lease_owner text,
                  lease_until bigint,
                  notify_pending boolean NOT NULL DEFAULT false,
                  notify_owner text,
                  notify_until bigint
                )
                """,
                "CREATE INDEX sdui_queue_pending ON sdui_queue (route, seq) WHERE state = 'pending'",
                "CREATE INDEX sdui_queue_finished ON sdui_queue (finished_at) WHERE state <> 'pending'",
                "CREATE INDEX sdui_queue_unnotified ON sdui_queue (finished_at, seq) WHERE notify_pending",
                // One row: when finished entries were last removed, so one replica per interval does it.
                """
                CREATE TABLE sdui_queue_state (
                  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                  pruned_at bigint NOT NULL DEFAULT 0
                )
                """,
                "INSERT INTO sdui_queue_state DEFAULT VALUES",
            ]
        ),
        Migration(
            version: 3,
            summary: "creates and the writes that name their local identifiers",
            statements: [
                // A create's local identifier (unique while it is pending) and the backend's; a write's creates, and
                // the one whose failure failed it.
                """
                ALTER TABLE sdui_queue ADD COLUMN local_id text, ADD COLUMN remote_id text,
                  ADD COLUMN remote_is_number boolean NOT NULL DEFAULT false, ADD COLUMN depends_on text[],
                  ADD COLUMN dependency_failed text
                """,
                """
                CREATE UNIQUE INDEX sdui_queue_pending_local ON sdui_queue (local_id)
                WHERE state = 'pending' AND local_id IS NOT NULL
                """,
                "CREATE INDEX sdui_queue_local ON sdui_queue (local_id, seq) WHERE local_id IS NOT NULL",
            ]
        ),
    ]

    /// Brings the database's schema up to ``migrations``.
    ///
    /// - Throws: ``ClusterSchemaError`` when the database has a migration this binary does not know (a newer
    ///   replica migrated it), or the database's error when a statement fails; then nothing of this call stays.
    public static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await migrate(client, migrations: migrations, logger: logger)
    }

    /// Brings the database's schema up to ``migrations`` over `connection` (one not in a transaction).
    public static func migrate(on connection: PostgresConnection, logger: Logger) async throws {
        try await migrate(migrations, logger: logger) { run in
            try await connection.withTransaction(logger: logger) { try await run($0) }
        }
    }

    /// Brings the database's schema up to `migrations`, which must be numbered 1, 2, 3… in order.
    static func migrate(_ client: PostgresClient, migrations: [Migration], logger: Logger) async throws {
        try await migrate(migrations, logger: logger) { run in
            try await client.withTransaction(logger: logger) { try await run($0) }
        }
    }

    /// Runs the missing migrations in the transaction `inTransaction` opens, and logs what ran.
    private static func migrate(
        _ migrations: [Migration],
        logger: Logger,
        inTransaction: (_ run: (PostgresConnection) async throws -> [Int32]) async throws -> [Int32]
    ) async throws {
        for (index, migration) in migrations.enumerated() where migration.version != Int32(index + 1) {
            throw ClusterSchemaError("migration \(migration.version) is out of order: expected \(index + 1)")
        }
        let ran: [Int32]
        do {
            ran = try await inTransaction { connection in
                try await runMissing(migrations, on: connection, logger: logger)
            }
        } catch let error as PostgresTransactionError {
            // What failed inside the transaction, not the wrapper: it was rolled back either way.
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
        for version in ran {
            let summary = migrations[Int(version) - 1].summary
            logger.info("cluster schema migrated", metadata: ["version": "\(version)", "migration": "\(summary)"])
        }
        if ran.isEmpty {
            logger.debug("cluster schema is up to date", metadata: ["version": "\(migrations.count)"])
        }
    }

    /// Under the advisory lock, runs the migrations of `migrations` the database lacks on `connection`, which is
    /// in a transaction; returns their versions.
    private static func runMissing(
        _ migrations: [Migration],
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> [Int32] {
        try await connection.query("SELECT pg_advisory_xact_lock(\(advisoryLockKey))", logger: logger)
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS sdui_schema_migrations (
              version int PRIMARY KEY,
              applied_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            logger: logger
        )
        var applied: Set<Int32> = []
        let rows = try await connection.query("SELECT version FROM sdui_schema_migrations", logger: logger)
        for try await version in rows.decode(Int32.self) {
            applied.insert(version)
        }
        let known = Int32(migrations.count)
        if let newest = applied.max(), newest > known {
            throw ClusterSchemaError(
                "the database's schema is at version \(newest), but this binary knows versions up to \(known): "
                    + "a newer sdui-proxy migrated it; run that version (or a newer one) against this database"
            )
        }
        var ran: [Int32] = []
        for migration in migrations where !applied.contains(migration.version) {
            for statement in migration.statements {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            try await connection.query(
                "INSERT INTO sdui_schema_migrations (version) VALUES (\(migration.version))",
                logger: logger
            )
            ran.append(migration.version)
        }
        return ran
    }
}
