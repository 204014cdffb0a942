import Logging
import PostgresNIO
import SDUIProxyCore

// What the fleet's log is set up with and reports, the names it shares with PostgreSQL, and the statements that need
// nothing of the actor's state: kept apart from the actor that runs the log.

extension FleetLog {
    /// What became of an invalidation made here, as far as the fleet goes.
    public enum FanOut: String, Sendable {
        /// Written to the log: the other replicas apply it when notified.
        case recorded
        /// Applied here only for now: it is written when PostgreSQL is reachable again.
        case pending
    }

    public struct Settings: Sendable {
        /// Shown in logs, metrics and `/cluster`, and written with each row.
        public var replicaName: String
        /// How often the log is read without a notification: a lost notification delays an invalidation by at most
        /// this long.
        public var pollInterval: Duration = .seconds(1)
        /// How often this replica says it is alive, and how far it has applied the log.
        public var heartbeatInterval: Duration = .seconds(5)
        /// How long rows are kept. A replica away for longer empties its cache when it comes back.
        public var retention: Duration = .seconds(3600)
        /// How often rows older than the retention are removed (by whichever replica gets to it first).
        public var pruneInterval: Duration = .seconds(60)
        /// The first reconnection's delay, doubled after each failure up to the second.
        public var reconnectDelays: (first: Duration, maximum: Duration) = (.milliseconds(100), .seconds(2))
        /// How long an invalidation's answer waits for its row to be written before it says `pending`.
        public var recordWait = Settings.defaultRecordWait
        /// ``recordWait`` unless set: what a deployment waits.
        public static let defaultRecordWait: Duration = .seconds(2)
        /// How long a read or write of the log may take before its connection is taken for dead and closed: a
        /// half-open connection (a server that vanished without closing it) answers nothing, ever.
        public var queryTimeout = Settings.defaultQueryTimeout
        /// ``queryTimeout`` unless set.
        public static let defaultQueryTimeout: Duration = .seconds(5)

        public init(replicaName: String) {
            self.replicaName = replicaName
        }
    }

    /// What applying a row does on this replica.
    public struct Appliers: Sendable {
        /// Applies an invalidation to the cache; returns how many responses it reached.
        public var invalidate: @Sendable (CacheInvalidation) -> Int
        /// Starts a fleet prefetch here.
        public var prefetch: @Sendable (FleetPrefetch) -> Void

        public init(
            invalidate: @escaping @Sendable (CacheInvalidation) -> Int,
            prefetch: @escaping @Sendable (FleetPrefetch) -> Void
        ) {
            self.invalidate = invalidate
            self.prefetch = prefetch
        }
    }

    /// A replica seen in the last minute.
    public struct Replica: Sendable, Equatable {
        public var name: String
        /// The last row it had applied when it was last seen.
        public var appliedID: Int64
        public var secondsSinceSeen: Double
    }

    /// What `/cluster` shows.
    public struct Status: Sendable {
        public var replicaName: String
        public var connected: Bool
        /// The last row applied here; nil before the first connection.
        public var appliedID: Int64?
        /// The last row the log had when this replica last looked.
        public var headID: Int64
        /// Invalidations made here and not yet written.
        public var pending: Int
        public var replicas: [Replica]
    }

    /// The notification channel; the payload is not used, only that a row was written.
    static let channel = "sdui_fleet_log"
    /// The advisory lock that orders the log's writers (an arbitrary constant of this program's own).
    static let writeLock: Int64 = 0x5344_5549_4c4f_4701
    /// The most rows read at once; more are read by the next fetch at once.
    static let fetchLimit = 1000

    /// How many replicas seen in the last minute have applied row `id`, how many were seen, and whether
    /// `replicaName` is among the first.
    static func replicasCount(
        applied id: Int64,
        replicaName: String,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (took: Int, seen: Int, selfCounted: Bool) {
        let rows = try await connection.query(
            """
            SELECT count(*) FILTER (WHERE applied_id >= \(id)), count(*),
                   bool_or(name = \(replicaName) AND applied_id >= \(id))
            FROM sdui_replicas WHERE last_seen > now() - interval '1 minute'
            """,
            logger: logger
        )
        for try await (took, seen, selfCounted) in rows.decode((Int, Int, Bool?).self) {
            return (took, seen, selfCounted ?? false)
        }
        return (0, 0, false)
    }

    /// Deletes the log's rows older than `retention` (recording how far it went) and the replicas not seen for a
    /// day, when this connection gets the pruning lock; another replica pruning at the same time skips it.
    static func prune(olderThan retention: Duration, on connection: PostgresConnection, logger: Logger) async throws {
        let seconds = Double(retention.components.seconds) + Double(retention.components.attoseconds) / 1e18
        try await connection.query(
            """
            WITH allowed AS (SELECT pg_try_advisory_xact_lock(\(Self.writeLock + 1)) AS yes),
            deleted AS (
                DELETE FROM sdui_invalidation_log
                WHERE (SELECT yes FROM allowed) AND created_at < now() - make_interval(secs => \(seconds))
                RETURNING id
            )
            UPDATE sdui_fleet_log_state SET pruned_through = greatest(pruned_through, (SELECT max(id) FROM deleted))
            WHERE EXISTS (SELECT 1 FROM deleted)
            """,
            logger: logger
        )
        try await connection.query(
            "DELETE FROM sdui_replicas WHERE last_seen < now() - interval '1 day'",
            logger: logger
        )
    }
}
