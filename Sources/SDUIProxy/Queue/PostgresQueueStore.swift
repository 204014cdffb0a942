import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import SDUIProxyCore
import Synchronization

/// A ``QueueStore`` in a PostgreSQL database that the replicas of a fleet share (`queue.store: postgres://...`).
///
/// Any replica accepts a write (its `202` follows the commit) and any replica delivers. A deliverer claims what
/// it sends with a lease (``QueueClaimRules``): concurrent routes with `FOR UPDATE SKIP LOCKED`, so replicas
/// claim different requests; a sequential route only at its head, locked while it is decided, so the database,
/// not one process's memory, keeps one request of the route in flight. A replica that dies mid-delivery stops
/// renewing its lease; when it runs out another replica delivers the request again, with the same
/// `Idempotency-Key`. An outcome is recorded only by the lease's holder, so its handlers run once in the fleet;
/// webhook notifications are leased the same way, and old entries are removed by one replica per interval.
///
/// Inserts on a sequential route take a transaction-scoped advisory lock of the route, so arrival order (`seq`) is
/// also commit order: a request that commits late can never slip in ahead of one already being delivered.
///
/// Nothing is needed from the database at start: a replica whose PostgreSQL is down serves, refuses writes it
/// would have to queue with 503, and takes them again once it is back. The schema is brought up to date on the
/// first connection. Each operation waits at most `operationTimeout` for a connection and for its answer.
public final class PostgresQueueStore: QueueStore {
    public struct Settings: Sendable {
        /// Who holds this process's leases (``QueueClaimRules/owner(replicaName:)``).
        public var owner: String
        /// How long a claim lasts without renewal (`queue.leaseTimeout`).
        public var leaseTimeout: Duration
        /// The least time between two removals of finished entries, fleet-wide.
        public var cleanupInterval: Duration
        /// How long an operation may wait for a connection and for its answer.
        public var operationTimeout: Duration = .seconds(5)
        /// The keys of the concurrent routes: their inserts need no order, and take no lock. Every other route's
        /// (a route this replica does not know included) are ordered.
        public var concurrentRoutes: Set<String> = []

        public init(owner: String, leaseTimeout: Duration, cleanupInterval: Duration) {
            self.owner = owner
            self.leaseTimeout = leaseTimeout
            self.cleanupInterval = cleanupInterval
        }
    }

    public let settings: Settings
    let client: PostgresClient
    private let running: Task<Void, Never>
    private let metrics: QueueClaimMetrics?
    let logger: Logger
    /// Whether the schema was brought up to date on a connection of this store.
    let migrated = Atomic(false)

    /// The key of the advisory locks that order inserts, one per route ("SDUI" in ASCII; the route's hash is
    /// the second key).
    static let insertLockKey: Int32 = 0x5344_5549
    /// The database's clock, in milliseconds since the epoch. Every time in the tables is on it (leases, next
    /// attempts, queue and finish times), so replicas whose clocks disagree still agree on what is due, how old a
    /// request is, and whose lease ran out; times are moved between it and this process's clock as they go in and
    /// come out, by the clocks' offset (``onDatabaseClock(_:)``, ``onLocalClock(_:)``).
    static let databaseNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    /// How far the database's clock is ahead of this process's, in milliseconds, as last measured; and when (on
    /// this process's clock). One offset for every conversion, so a time written and read back is the same.
    private let clockOffset = Atomic<Int64>(0)
    private let offsetMeasuredAt = Atomic<Int64>(0)
    /// How often the offset is measured again (clocks drift, and are stepped).
    private static let offsetLifetime: Int64 = 30_000

    /// `time`, on this process's clock, moved onto the database's.
    func onDatabaseClock(_ time: QueueInstant) -> Int64 {
        time.millisecondsSinceEpoch + clockOffset.load(ordering: .relaxed)
    }

    /// A time on the database's clock moved onto this process's.
    func onLocalClock(_ milliseconds: Int64) -> QueueInstant {
        QueueInstant(millisecondsSinceEpoch: milliseconds - clockOffset.load(ordering: .relaxed))
    }

    /// Measures the clocks' offset on `connection` when the last measure is old: the database's reading against
    /// the middle of the round trip that read it, so the error is at most half that trip.
    func measureClockOffsetIfOld(on connection: PostgresConnection, logger: Logger) async throws {
        let before = QueueInstant.now().millisecondsSinceEpoch
        guard before - offsetMeasuredAt.load(ordering: .relaxed) >= Self.offsetLifetime else { return }
        let rows = try await connection.query("SELECT \(unescaped: Self.databaseNow)", logger: logger)
        for try await databaseNow in rows.decode(Int64.self) {
            let after = QueueInstant.now().millisecondsSinceEpoch
            clockOffset.store(databaseNow - (before + after) / 2, ordering: .relaxed)
            offsetMeasuredAt.store(after, ordering: .relaxed)
        }
    }
    static let entryColumns =
        "seq, id, route, method, target, headers, body, enqueued_at, attempts, next_attempt_at, last_error, status, "
        + "local_id, depends_on"

    /// A store over the database `url` names, connecting as it needs to.
    ///
    /// - Parameter replicaName: shown in PostgreSQL's `pg_stat_activity` as part of `application_name`.
    public init(
        url: PostgresURL,
        replicaName: String,
        settings: Settings,
        metrics: QueueClaimMetrics? = nil,
        logger: Logger
    ) {
        var configuration = PostgresConnectionSettings.clientConfiguration(
            url,
            applicationName: "sdui-proxy queue " + replicaName,
            connectTimeout: settings.operationTimeout,
            maximumConnections: 8
        )
        configuration.options.additionalStartupParameters += PostgresConnectionSettings.sessionSafeguards
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.logger = logger
        self.running = Task { await client.run() }
    }

    /// Opens the store and tries the database once, so a wrong address or password is in the log at start; a
    /// database that cannot be reached does not stop the replica.
    public static func open(
        url: PostgresURL,
        replicaName: String,
        settings: Settings,
        metrics: QueueClaimMetrics? = nil,
        logger: Logger
    ) async -> PostgresQueueStore {
        let store = PostgresQueueStore(
            url: url,
            replicaName: replicaName,
            settings: settings,
            metrics: metrics,
            logger: logger
        )
        do {
            _ = try await store.pendingCount()
        } catch {
            logger.warning(
                "the write queue's database cannot be reached yet: writes that must be queued get 503 until it can",
                metadata: ["database": "\(url)", "error": "\(PostgresErrorText.describe(error))"]
            )
        }
        return store
    }

    // MARK: QueueStore

    /// Every replica of the fleet delivers from this database.
    public var isShared: Bool { true }

    public func insert(_ entry: QueueEntry, naming candidates: [LocalIdentifier]) async throws -> [String] {
        let ordered = !settings.concurrentRoutes.contains(entry.route)
        let names = candidates.map(\.value)
        do {
            return try await withConnection { connection, logger in
                try await connection.withTransaction(logger: logger) { connection in
                    // Held to the commit, so on an ordered route commits come in `seq` order; unordered inserts
                    // commit side by side (and share the disk's flushes).
                    if ordered {
                        try await connection.query(
                            "SELECT pg_advisory_xact_lock(\(Self.insertLockKey), hashtext(\(entry.route)))",
                            logger: logger
                        )
                    }
                    // The creates the write names: the newest create of each named local identifier, whichever
                    // replica accepted it.
                    let rows = try await connection.query(
                        """
                        INSERT INTO sdui_queue
                            (id, route, method, target, headers, body, enqueued_at, attempts, next_attempt_at,
                             last_error, status, local_id, depends_on)
                        VALUES (\(entry.id), \(entry.route), \(entry.method.rawValue), \(entry.target), \
                        \(QueueEntry.encode(entry.headers)), \(entry.body), \
                        \(self.onDatabaseClock(entry.enqueuedAt)), \(entry.attempts), \
                        \(self.onDatabaseClock(entry.nextAttemptAt)), \(entry.lastError), \(entry.lastStatus), \
                        \(entry.localId?.value), \
                        (SELECT array_agg(c.id) FROM unnest(\(names)::text[]) AS n(value)
                         CROSS JOIN LATERAL (SELECT id FROM sdui_queue WHERE local_id = n.value ORDER BY seq DESC
                                             LIMIT 1) AS c))
                        RETURNING depends_on
                        """,
                        logger: logger
                    )
                    for try await dependsOn in rows.decode([String]?.self) { return dependsOn ?? [] }
                    return []
                }
            }
        } catch let error as QueueStoreError {
            if let local = entry.localId, error.message.contains("sdui_queue_pending_local") {
                throw LocalIdentifierConflict(local: local)
            }
            throw error
        }
    }

    public func firstPending(route: String) async throws -> QueueEntry? {
        try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.entryColumns), lease_owner, lease_until, \(unescaped: Self.databaseNow)
                FROM sdui_queue WHERE state = 'pending' AND route = \(route) ORDER BY seq LIMIT 1
                """,
                logger: logger
            )
            for try await row in rows { return try self.claimedRow(row).entry }
            return nil
        }
    }

    public func claimHead(route: String, at now: QueueInstant) async throws -> QueueHeadClaim {
        let ahead = max(0, now.millisecondsSinceEpoch - QueueInstant.now().millisecondsSinceEpoch)
        let owner = settings.owner
        let lease = settings.leaseTimeout.milliseconds
        let (claim, takenOver) = try await withConnection { connection, logger in
            try await connection.withTransaction(logger: logger) { connection -> (QueueHeadClaim, String?) in
                // Locked until the transaction ends: two replicas never decide about one head at once.
                let rows = try await connection.query(
                    """
                    SELECT \(unescaped: Self.entryColumns), lease_owner, lease_until, \(unescaped: Self.databaseNow)
                    FROM sdui_queue WHERE state = 'pending' AND route = \(route) ORDER BY seq LIMIT 1 FOR UPDATE
                    """,
                    logger: logger
                )
                var found: ClaimedRow?
                for try await row in rows { found = try self.claimedRow(row) }
                guard let head = found else { return (.empty, nil) }
                if try await self.waitsForCreates(head.entry, on: connection, logger: logger) {
                    return (.waitingForCreates, nil)
                }
                // `now` on the database's clock: its reading, read with the head, or as far after it as `now` was
                // ahead of this process's clock when asked (never behind: the time the query took is not taken off).
                let decision = QueueClaimRules.head(
                    nextAttemptAt: head.nextAttemptOnDatabaseClock,
                    lease: head.lease,
                    owner: owner,
                    now: head.databaseNow + ahead
                )
                switch decision {
                case .wait(let until):
                    return (.notBefore(self.onLocalClock(until)), nil)
                case .claim(let takenOver):
                    try await connection.query(
                        """
                        UPDATE sdui_queue SET lease_owner = \(owner), lease_until = \(head.databaseNow + lease)
                        WHERE seq = \(head.seq)
                        """,
                        logger: logger
                    )
                    return (.claimed(head.entry), takenOver)
                }
            }
        }
        if case .claimed(let entry) = claim {
            metrics?.claimed(takenOver: takenOver == nil ? 0 : 1)
            if let takenOver { logTakeOver(of: entry, from: takenOver) }
        }
        return claim
    }

    public func claimDue(
        routes: [String],
        at now: QueueInstant,
        excluding: Set<String>,
        limit: Int
    ) async throws -> [QueueEntry] {
        guard !routes.isEmpty, limit > 0 else { return [] }
        // As in ``claimHead(route:at:)``: due by the database's clock, or as far after it as `now` is ahead.
        let ahead = max(0, now.millisecondsSinceEpoch - QueueInstant.now().millisecondsSinceEpoch)
        let owner = settings.owner
        let lease = settings.leaseTimeout.milliseconds
        let excluded = excluding.sorted()
        let claimed = try await withConnection { connection, logger in
            // SKIP LOCKED: what another replica is claiming right now is left to it.
            let rows = try await connection.query(
                """
                WITH due AS (
                  SELECT seq, lease_owner AS previous_owner, lease_until AS previous_until FROM sdui_queue AS q
                  WHERE state = 'pending' AND route = ANY(\(routes)) AND NOT (id = ANY(\(excluded)))
                    AND NOT \(unescaped: Self.waitsForCreate)
                    AND next_attempt_at <= \(unescaped: Self.databaseNow) + \(ahead)
                    AND (lease_until IS NULL OR lease_until < \(unescaped: Self.databaseNow) OR lease_owner = \(owner))
                  ORDER BY seq LIMIT \(limit) FOR UPDATE SKIP LOCKED
                )
                UPDATE sdui_queue AS q SET lease_owner = \(owner), lease_until = \(unescaped: Self.databaseNow) + \(lease)
                FROM due WHERE q.seq = due.seq
                RETURNING \(unescaped: Self.qualifiedEntryColumns), due.previous_owner, due.previous_until, \
                \(unescaped: Self.databaseNow)
                """,
                logger: logger
            )
            var claimed: [ClaimedRow] = []
            for try await row in rows { claimed.append(try self.claimedRow(row)) }
            return claimed.sorted { $0.seq < $1.seq }
        }
        let takenOver = claimed.filter { $0.lease.map { $0.owner != owner } ?? false }
        metrics?.claimed(count: claimed.count, takenOver: takenOver.count)
        for row in takenOver { logTakeOver(of: row.entry, from: row.lease?.owner ?? "") }
        return claimed.map(\.entry)
    }

    public func earliestAttempt(routes: [String], excluding: Set<String>) async throws -> QueueInstant? {
        guard !routes.isEmpty else { return nil }
        let owner = settings.owner
        let excluded = excluding.sorted()
        return try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                SELECT min(CASE
                  WHEN lease_owner <> \(owner) AND lease_until > \(unescaped: Self.databaseNow)
                  THEN GREATEST(next_attempt_at, lease_until) ELSE next_attempt_at END)
                FROM sdui_queue AS q
                WHERE state = 'pending' AND route = ANY(\(routes)) AND NOT (id = ANY(\(excluded)))
                  AND NOT \(unescaped: Self.waitsForCreate)
                """,
                logger: logger
            )
            for try await earliest in rows.decode(Int64?.self) {
                return earliest.map { self.onLocalClock($0) }
            }
            return nil
        }
    }

    public func renewClaim(id: String) async throws -> Bool {
        let owner = settings.owner
        let lease = settings.leaseTimeout.milliseconds
        return try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                UPDATE sdui_queue SET lease_until = \(unescaped: Self.databaseNow) + \(lease)
                WHERE id = \(id) AND state = 'pending' AND lease_owner = \(owner) RETURNING seq
                """,
                logger: logger
            )
            for try await _ in rows { return true }
            return false
        }
    }

    public func releaseClaims(ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        let owner = settings.owner
        try await withConnection { connection, logger in
            try await connection.query(
                """
                UPDATE sdui_queue SET lease_owner = NULL, lease_until = NULL
                WHERE id = ANY(\(ids)) AND lease_owner = \(owner)
                """,
                logger: logger
            )
        }
    }

    public func recordAttempt(
        id: String,
        attempts: Int,
        nextAttemptAt: QueueInstant,
        lastError: String,
        status: Int?
    ) async throws {
        let owner = settings.owner
        let recorded = try await withConnection { connection, logger in
            // As for outcomes, an earlier try of this recording whose answer was lost counts as done.
            let rows = try await connection.query(
                """
                WITH done AS (
                  UPDATE sdui_queue
                  SET attempts = \(attempts), next_attempt_at = \(self.onDatabaseClock(nextAttemptAt)),
                    last_error = \(lastError), status = \(status), lease_owner = NULL, lease_until = NULL
                  WHERE id = \(id) AND state = 'pending' AND lease_owner = \(owner) RETURNING seq
                )
                SELECT EXISTS (SELECT 1 FROM done)
                  OR EXISTS (
                    SELECT 1 FROM sdui_queue
                    WHERE id = \(id) AND state = 'pending' AND lease_owner IS NULL AND attempts = \(attempts)
                  )
                """,
                logger: logger
            )
            for try await recorded in rows.decode(Bool.self) { return recorded }
            return false
        }
        if !recorded { logLostClaim(id: id, outcome: "a failed attempt") }
    }

    public func finish(
        id: String,
        outcome state: QueueConfiguration.Outcome,
        lastError: String?,
        status: Int?,
        attempts: Int,
        at time: QueueInstant,
        awaitingNotification: Bool,
        identifiers: QueueOutcomeIdentifiers
    ) async throws -> Bool {
        let owner = settings.owner
        // A write whose create failed is `failed` with the create named.
        let stored = state == .delivered ? "delivered" : "failed"
        let remoteIsNumber = identifiers.remoteId?.isNumber ?? false
        let lease = settings.leaseTimeout.milliseconds
        let notifier: String? = awaitingNotification ? owner : nil
        let finished = try await withConnection { connection, logger in
            // The body and headers are not needed any more: only the status stays readable. The outcome's
            // notification is leased to this replica, which sends it now. The outer query reads the row as it was
            // before the update: finished by this replica already means an earlier try of this same recording
            // committed, though its answer was lost (a connection that dropped after the commit).
            let rows = try await connection.query(
                """
                WITH done AS (
                  UPDATE sdui_queue
                  SET state = \(stored), status = \(status),
                    last_error = CASE WHEN \(state != .delivered) THEN COALESCE(\(lastError), last_error) END,
                    remote_id = \(identifiers.remoteId?.text), remote_is_number = \(remoteIsNumber),
                    dependency_failed = \(identifiers.failedCreate),
                    attempts = \(attempts), finished_at = \(self.onDatabaseClock(time)), finished_by = \(owner),
                    body = NULL, headers = NULL, lease_owner = NULL, lease_until = NULL,
                    notify_pending = \(awaitingNotification), notify_owner = \(notifier),
                    notify_until = CASE WHEN \(awaitingNotification) THEN \(unescaped: Self.databaseNow) + \(lease) END
                  WHERE id = \(id) AND state = 'pending' AND lease_owner = \(owner) RETURNING seq
                )
                SELECT EXISTS (SELECT 1 FROM done)
                  OR EXISTS (
                    SELECT 1 FROM sdui_queue WHERE id = \(id) AND state = \(stored) AND finished_by = \(owner)
                  )
                """,
                logger: logger
            )
            for try await finished in rows.decode(Bool.self) { return finished }
            return false
        }
        if !finished { logLostClaim(id: id, outcome: "its outcome (\(state.rawValue))") }
        return finished
    }

    /// Claims the outcomes awaiting notification that no other replica is notifying (or whose notifier's lease
    /// ran out), with those this replica already holds: listing them again renews their lease.
    public func unnotifiedOutcomes(limit: Int) async throws -> [QueueOutcomeEvent] {
        let owner = settings.owner
        let lease = settings.leaseTimeout.milliseconds
        let rows = try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                WITH due AS (
                  SELECT seq FROM sdui_queue
                  WHERE notify_pending AND (notify_owner = \(owner) OR notify_until IS NULL
                    OR notify_until < \(unescaped: Self.databaseNow))
                  ORDER BY finished_at, seq LIMIT \(limit) FOR UPDATE SKIP LOCKED
                )
                UPDATE sdui_queue AS q SET notify_owner = \(owner), notify_until = \(unescaped: Self.databaseNow) + \(lease)
                FROM due WHERE q.seq = due.seq
                RETURNING q.finished_at, q.seq, q.id, q.route, q.state, q.status, q.attempts, q.last_error, q.local_id,
                  q.remote_id, q.dependency_failed
                """,
                logger: logger
            )
            var outcomes: [(Int64, Int64, QueueOutcomeEvent)] = []
            for try await (
                finishedAt, seq, id, route, state, status, attempts, lastError, localId, remoteId, failedCreate
            ) in rows.decode(
                (Int64?, Int64, String, String, String, Int?, Int, String?, String?, String?, String?).self
            ) {
                guard var outcome = QueueConfiguration.Outcome(rawValue: state) else {
                    throw QueueStoreError("the outcome of \(id) has an unknown state \(state)")
                }
                if failedCreate != nil { outcome = .dependencyFailed }
                let event = QueueOutcomeEvent(
                    id: id,
                    route: route,
                    outcome: outcome,
                    status: status,
                    attempts: attempts,
                    error: outcome == .delivered ? nil : lastError,
                    localId: localId,
                    remoteId: remoteId,
                    failedCreate: failedCreate
                )
                outcomes.append((finishedAt ?? 0, seq, event))
            }
            return outcomes
        }
        return rows.sorted { ($0.0, $0.1) < ($1.0, $1.1) }.map(\.2)
    }

    public func markNotified(id: String) async throws {
        try await withConnection { connection, logger in
            try await connection.query(
                """
                UPDATE sdui_queue SET notify_pending = false, notify_owner = NULL, notify_until = NULL
                WHERE id = \(id)
                """,
                logger: logger
            )
        }
    }

    public func depths() async throws -> [QueueRouteDepth] {
        try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                SELECT route, count(*)::bigint, min(enqueued_at) FROM sdui_queue
                WHERE state = 'pending' GROUP BY route ORDER BY route
                """,
                logger: logger
            )
            var depths: [QueueRouteDepth] = []
            for try await (route, depth, oldest) in rows.decode((String, Int, Int64?).self) {
                depths.append(
                    QueueRouteDepth(
                        route: route,
                        depth: depth,
                        oldestEnqueuedAt: oldest.map { self.onLocalClock($0) }
                    )
                )
            }
            return depths
        }
    }

    public func pendingCount() async throws -> Int {
        try await withConnection { connection, logger in
            let rows = try await connection.query(
                "SELECT count(*)::bigint FROM sdui_queue WHERE state = 'pending'",
                logger: logger
            )
            for try await count in rows.decode(Int.self) { return count }
            return 0
        }
    }

    /// Removes finished entries when no replica did for `cleanupInterval`; answers 0 without removing anything
    /// when another one did.
    public func removeFinished(before time: QueueInstant) async throws -> Int {
        let interval = settings.cleanupInterval.milliseconds
        return try await withConnection { connection, logger in
            try await connection.withTransaction(logger: logger) { connection in
                let turn = try await connection.query(
                    """
                    UPDATE sdui_queue_state SET pruned_at = \(unescaped: Self.databaseNow)
                    WHERE pruned_at <= \(unescaped: Self.databaseNow) - \(interval) RETURNING pruned_at
                    """,
                    logger: logger
                )
                var mine = false
                for try await _ in turn { mine = true }
                guard mine else { return 0 }
                let removed = try await connection.query(
                    """
                    DELETE FROM sdui_queue AS f
                    WHERE state <> 'pending' AND finished_at < \(self.onDatabaseClock(time))
                      AND NOT (local_id IS NOT NULL AND EXISTS (
                        SELECT 1 FROM sdui_queue AS q WHERE q.state = 'pending' AND f.id = ANY(q.depends_on)))
                    RETURNING seq
                    """,
                    logger: logger
                )
                var count = 0
                for try await _ in removed { count += 1 }
                return count
            }
        }
    }

    /// The value of a session setting (`lock_timeout`) on one of the store's connections; nil for a name that is
    /// not a plain setting name. For tests.
    func sessionSetting(_ name: String) async throws -> String? {
        guard !name.isEmpty, name.utf8.allSatisfy({ $0 == UInt8(ascii: "_") || (97...122).contains($0) }) else {
            return nil
        }
        return try await withConnection { connection, logger in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: "SHOW \(name)"), logger: logger)
            for try await value in rows.decode(String.self) { return value }
            return nil
        }
    }

    /// Closes the connections; leases still held run out and are taken over.
    public func close() async throws {
        running.cancel()
        await running.value
    }
}

extension Duration {
    /// The whole milliseconds in this duration.
    fileprivate var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
