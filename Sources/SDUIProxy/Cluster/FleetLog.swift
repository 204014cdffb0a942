import Logging
import NIOCore
import PostgresNIO
import SDUIProxyCore
import ServiceLifecycle
import Synchronization

/// This replica's part in the fleet's shared log in PostgreSQL: the invalidations (and fleet prefetches) made here
/// are written to it, and every other replica's are applied here.
///
/// ``FleetLogFollower`` decides; this actor runs its actions over one connection of its own, which listens for the
/// log's notifications and also reads and writes the log, so a lost connection is one event, not several. Rows
/// are written one batch at a time, each in a transaction that takes an advisory lock first: ids are then given
/// and committed in the same order, and a replica reading after its cursor never passes over a row that commits
/// late. The `NOTIFY` is sent in the same transaction, so it is delivered only if the rows are there.
///
/// Everything is applied here before it is written: a replica whose PostgreSQL is down keeps serving, its purges
/// take effect here at once, and they reach the others when PostgreSQL is back.
public actor FleetLog: Service {
    private enum Work: Sendable {
        case connect(generation: Int)
        case reconnect(after: Duration)
        case fetch(generation: Int, after: Int64)
        case record(generation: Int, [FleetLogFollower.Made])
        case expire(token: UInt64, after: Duration)
        case heartbeat(generation: Int)
        /// An invalidation made here whose maker does not wait for the log.
        case made(CacheInvalidation)
    }

    private let configuration: PostgresConnection.Configuration
    private let settings: Settings
    private let appliers: Appliers
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let metrics: ClusterMetrics?
    private nonisolated let work: AsyncStream<Work>
    private nonisolated let workContinuation: AsyncStream<Work>.Continuation

    private var follower: FleetLogFollower
    private var connection: PostgresConnection?
    /// Counts connections: what an earlier connection reports after it was given up is ignored.
    private var generation = 0
    private var headID: Int64 = 0
    private var replicas: [Replica] = []
    private var waiters: [UInt64: CheckedContinuation<FanOut, Never>] = [:]
    private var recordingTokens: [UInt64] = []
    private var recordedIDs: [UInt64: Int64] = [:]
    /// The tasks running work items and the timers, by an id of their own.
    private var running: [Int: Task<Void, Never>] = [:]
    private var nextTaskID = 0
    /// Set when the shutdown cancels the running work: nothing starts after. A connect that fails because it was
    /// cancelled would otherwise schedule a reconnect that outlives the replica, on event loops shut down by then.
    private var isStopped = false
    /// Failed connection attempts since the last connection: the first failure is a warning, the retries that
    /// follow are not logged again until one succeeds.
    private var failedAttempts = 0

    public init(
        configuration: PostgresConnection.Configuration,
        settings: Settings,
        appliers: Appliers,
        eventLoop: any EventLoop,
        logger: Logger,
        metrics: ClusterMetrics? = nil
    ) {
        var configuration = configuration
        // A replica that vanishes mid-write (a half-open connection) would hold the writers' advisory lock until
        // the server noticed, hours later with TCP's defaults.
        configuration.options.additionalStartupParameters += PostgresConnectionSettings.sessionSafeguards
        self.configuration = configuration
        self.follower = FleetLogFollower(
            firstReconnectDelay: settings.reconnectDelays.first,
            maximumReconnectDelay: settings.reconnectDelays.maximum
        )
        self.settings = settings
        self.appliers = appliers
        self.eventLoop = eventLoop
        self.logger = logger
        self.metrics = metrics
        (work, workContinuation) = AsyncStream.makeStream(of: Work.self)
    }

    // MARK: Running

    public func run() async throws {
        execute(follower.start())
        start { await self.tick() }
        await withGracefulShutdownHandler {
            for await item in work {
                if case .made(let invalidation) = item {
                    // Taken in the order they were made: each is handed to the follower before the next.
                    write(invalidation)
                } else {
                    start(item)
                }
            }
        } onGracefulShutdown: {
            self.workContinuation.finish()
        }
        // The last invalidations of a replica on its way out (the listeners and queue delivery drained before
        // this) still go to the others, for as long as a query may take.
        let deadline = ContinuousClock.now + settings.queryTimeout
        while !Task.isCancelled, follower.isConnected, follower.pendingCount > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        // Closing the connection fails whatever still runs on it. What does not end within the query timeout
        // anyway (a PostgreSQL that stopped answering) is left behind: a shutdown must not wait on the database.
        isStopped = true
        let tasks = Array(running.values)
        running = [:]
        for task in tasks { task.cancel() }
        await closeConnection()
        await Self.waitForAll(tasks, upTo: settings.queryTimeout)
        for waiter in waiters.values { waiter.resume(returning: .pending) }
        waiters = [:]
    }

    /// Runs `item` in a task of its own.
    private func start(_ item: Work) {
        start { await self.perform(item) }
    }

    /// Runs `operation` in a task of its own, tracked until it ends so a shutdown can cancel it.
    private func start(_ operation: @escaping @Sendable () async -> Void) {
        guard !isStopped else { return }
        nextTaskID += 1
        let id = nextTaskID
        running[id] = Task {
            await operation()
            self.ended(id)
        }
    }

    private func ended(_ id: Int) {
        running.removeValue(forKey: id)
    }

    /// How many work items and timers run now: none once ``run()`` has returned.
    var runningWorkCount: Int { running.count }

    /// Waits until `tasks` have all ended, or `limit` has passed, whichever comes first.
    private static func waitForAll(_ tasks: [Task<Void, Never>], upTo limit: Duration) async {
        let done = Mutex(false)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resume = { @Sendable in
                if done.withLock({ wasDone in
                    defer { wasDone = true }
                    return !wasDone
                }) {
                    continuation.resume()
                }
            }
            Task {
                for task in tasks { await task.value }
                resume()
            }
            Task {
                try? await Task.sleep(for: limit)
                resume()
            }
        }
    }

    /// The timers: reading the log without a notification, the heartbeat and pruning.
    private func tick() async {
        var sinceHeartbeat = Duration.zero
        var sincePrune = settings.pruneInterval
        while !Task.isCancelled {
            do { try await Task.sleep(for: settings.pollInterval) } catch { return }
            execute(follower.rowsMayHaveArrived())
            sinceHeartbeat += settings.pollInterval
            sincePrune += settings.pollInterval
            if sinceHeartbeat >= settings.heartbeatInterval, follower.isConnected {
                sinceHeartbeat = .zero
                start(.heartbeat(generation: generation))
            }
            if sincePrune >= settings.pruneInterval, let connection, follower.isConnected {
                sincePrune = .zero
                await prune(on: connection)
            }
        }
    }

    private func execute(_ actions: [FleetLogFollower.Action]) {
        for action in actions {
            switch action {
            case .connect:
                generation += 1
                start(.connect(generation: generation))
            case .scheduleReconnect(let delay):
                start(.reconnect(after: delay))
            case .fetch(let after):
                start(.fetch(generation: generation, after: after))
            case .record(let batch):
                recordingTokens = batch.map(\.token)
                start(.record(generation: generation, batch))
            case .apply(let entries):
                apply(entries)
            case .flushCache(let reason):
                let removed = appliers.invalidate(CacheInvalidation(.all))
                logger.warning(
                    "emptied the cache to stay in step with the fleet",
                    metadata: ["reason": "\(reason)", "removed": "\(removed)"]
                )
                metrics?.flushed()
            }
        }
    }

    private func perform(_ item: Work) async {
        // A task made before the shutdown may only now get its turn (a busy process runs tasks late): too late
        // to start anything, least of all a connection on event loops that may be shut down by now.
        guard !isStopped else { return }
        switch item {
        case .connect(let generation):
            await connectAndListen(generation)
        case .reconnect(let delay):
            do { try await Task.sleep(for: delay) } catch { return }
            execute(follower.reconnectDue())
        case .fetch(let generation, let after):
            await fetch(after: after, generation)
        case .record(let generation, let batch):
            await record(batch, generation)
        case .expire(let token, let delay):
            do { try await Task.sleep(for: delay) } catch { return }
            waiters.removeValue(forKey: token)?.resume(returning: .pending)
        case .heartbeat(let generation):
            await heartbeat(generation)
        case .made(let invalidation):
            write(invalidation)
        }
    }

    // MARK: Invalidations made here

    /// Writes `invalidation`, already applied here, for the other replicas, without waiting: for invalidations made
    /// while answering a request (unsafe methods) or delivering a queued write. They are written in the order they
    /// were made.
    public nonisolated func record(_ invalidation: CacheInvalidation) {
        workContinuation.yield(.made(invalidation))
    }

    private func write(_ invalidation: CacheInvalidation) {
        metrics?.sent(invalidation)
        execute(follower.made(.invalidation(invalidation)).actions)
    }

    /// Writes `invalidation`, already applied here, for the other replicas. Answers once it is written, or as
    /// pending when PostgreSQL is unreachable or slower than ``Settings/recordWait``.
    public func invalidated(_ invalidation: CacheInvalidation) async -> FanOut {
        metrics?.sent(invalidation)
        return await write(.invalidation(invalidation)).fanOut
    }

    /// Writes a prefetch, already started here, for the other replicas, and waits up to ``Settings/recordWait`` for
    /// the replicas seen in the last minute to take it. Returns how many replicas have it, this one included, and
    /// how many were seen.
    public func prefetched(_ prefetch: FleetPrefetch) async -> (fanOut: FanOut, took: Int, replicas: Int) {
        let written = await write(.prefetch(prefetch))
        guard written.fanOut == .recorded, let id = written.id else {
            return (written.fanOut, 1, max(1, replicas.count))
        }
        let deadline = ContinuousClock.now + settings.recordWait
        var counts = (took: 1, seen: max(1, replicas.count))
        while let connection, ContinuousClock.now < deadline {
            if let latest = try? await withQueryTimeout(
                on: connection,
                {
                    try await Self.replicasCount(
                        applied: id,
                        replicaName: settings.replicaName,
                        on: connection,
                        logger: logger
                    )
                }
            ) {
                // This replica ran it when it was made, whether or not its own row counts it yet.
                counts = (max(1, latest.took + (latest.selfCounted ? 0 : 1)), max(1, latest.seen))
                if counts.took >= counts.seen { break }
            }
            do { try await Task.sleep(for: .milliseconds(50)) } catch { break }
        }
        return (.recorded, counts.took, counts.seen)
    }

    private func write(_ payload: FleetLogEntry.Payload) async -> (fanOut: FanOut, id: Int64?) {
        // Nothing is written once the log has stopped, so nothing is waited for.
        guard !isStopped else { return (.pending, nil) }
        let made = follower.made(payload)
        execute(made.actions)
        guard made.writing else { return (.pending, nil) }
        let fanOut = await withCheckedContinuation { continuation in
            waiters[made.token] = continuation
            start(.expire(token: made.token, after: settings.recordWait))
        }
        return (fanOut, recordedIDs.removeValue(forKey: made.token))
    }

    // MARK: Status

    /// ``status`` with the replicas read from the log now (and this one's progress written), as `/cluster` shows it.
    public func refreshedStatus() async -> Status {
        await heartbeat(generation)
        return status
    }

    public var status: Status {
        Status(
            replicaName: settings.replicaName,
            connected: follower.isConnected,
            appliedID: follower.appliedID,
            headID: max(headID, follower.appliedID ?? 0),
            pending: follower.pendingCount,
            replicas: replicas
        )
    }

    // MARK: PostgreSQL

    private func connectAndListen(_ generation: Int) async {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(
                on: eventLoop,
                configuration: configuration,
                id: generation,
                logger: logger
            )
        } catch {
            return connectionLost(generation, error)
        }
        // A connection the server ends (a restart, `pg_terminate_backend`) closes its channel; queries sent on it
        // then may never answer, so its close is the event to act on.
        connection.closeFuture.whenComplete { _ in
            Task { await self.connectionLost(generation, nil) }
        }
        do {
            // Every connection checks the schema: the database may have been replaced since the last one.
            try await withQueryTimeout(on: connection) {
                try await ClusterSchema.migrate(on: connection, logger: logger)
            }
            // Listening first, then reading the head: a row written in between is both notified and read.
            try await connection.listen(on: Self.channel) { notifications in
                try await withQueryTimeout(on: connection) { try await self.connected(connection, generation) }
                for try await _ in notifications {
                    guard generation == self.generation else { break }
                    execute(follower.rowsMayHaveArrived())
                }
            }
            connectionLost(generation, nil)
        } catch {
            connectionLost(generation, error)
        }
        try? await connection.close()
    }

    /// Reads the log's head and where it was pruned, and takes `connection` as the one in use.
    private func connected(_ connection: PostgresConnection, _ generation: Int) async throws {
        let rows = try await connection.query(
            """
            SELECT greatest(coalesce((SELECT max(id) FROM sdui_invalidation_log), 0), pruned_through), pruned_through
            FROM sdui_fleet_log_state
            """,
            logger: logger
        )
        var head: Int64 = 0
        var pruned: Int64 = 0
        for try await (first, second) in rows.decode((Int64, Int64).self) { (head, pruned) = (first, second) }
        guard generation == self.generation else { return }
        self.connection = connection
        headID = head
        failedAttempts = 0
        logger.info(
            "connected to the fleet's log",
            metadata: ["replica": "\(settings.replicaName)", "head": "\(head)"]
        )
        execute(follower.connected(head: head, prunedThrough: pruned))
        start(.heartbeat(generation: generation))
    }

    private func connectionLost(_ generation: Int, _ error: (any Error)?) {
        guard generation == self.generation else { return }
        // Anything still running on the connection reports with this generation, and is ignored.
        self.generation += 1
        if let connection {
            self.connection = nil
            connection.close().whenComplete { _ in }
        }
        failRecording()
        metrics?.reconnecting()
        failedAttempts += 1
        let reason = error.map(PostgresErrorText.describe) ?? "the connection closed"
        if failedAttempts == 1 {
            logger.warning(
                "the fleet's log in PostgreSQL is unreachable; invalidations made here apply here and are kept until it is back",
                metadata: ["replica": "\(settings.replicaName)", "error": "\(reason)"]
            )
        } else {
            logger.debug("the fleet's log is still unreachable", metadata: ["error": "\(reason)"])
        }
        execute(follower.connectionLost())
    }

    private func fetch(after cursor: Int64, _ generation: Int) async {
        guard let connection, generation == self.generation else { return }
        do {
            // One statement, one snapshot: the rows and how far the log was pruned agree.
            let rows = try await withQueryTimeout(on: connection) {
                try await connection.query(
                    """
                    SELECT s.pruned_through, l.id, l.kind, l.value, l.soft,
                           extract(epoch FROM clock_timestamp() - l.created_at)::float8
                    FROM sdui_fleet_log_state s
                    LEFT JOIN LATERAL (
                        SELECT id, kind, value, soft, created_at FROM sdui_invalidation_log
                        WHERE id > \(cursor) ORDER BY id LIMIT \(Self.fetchLimit)
                    ) l ON true
                    """,
                    logger: logger
                ).collect()
            }
            var pruned: Int64 = 0
            var entries: [FleetLogEntry] = []
            var lags: [Double] = []
            for row in rows {
                let (prunedThrough, id, kind, value, soft, lag) = try row.decode(
                    (Int64, Int64?, String?, String?, Bool?, Double?).self
                )
                pruned = prunedThrough
                guard let id, let kind, let value else { continue }
                guard let payload = FleetLogEntry.payload(kind: kind, value: value, soft: soft ?? false) else {
                    logger.warning("skipped a fleet log row that could not be read", metadata: ["id": "\(id)"])
                    entries.append(FleetLogEntry(id: id, payload: .unknown(kind: "unreadable")))
                    continue
                }
                entries.append(FleetLogEntry(id: id, payload: payload))
                if let lag { lags.append(lag) }
            }
            guard generation == self.generation else { return }
            if let last = entries.last { headID = max(headID, last.id) }
            execute(follower.fetched(entries, prunedThrough: pruned))
            for lag in lags { metrics?.fanOutLag(seconds: lag) }
            if entries.count == Self.fetchLimit { execute(follower.rowsMayHaveArrived()) }
        } catch {
            connectionLost(generation, error)
        }
    }

    private func record(_ batch: [FleetLogFollower.Made], _ generation: Int) async {
        // An earlier connection's write: its batch was failed when that connection was lost.
        guard generation == self.generation else { return }
        guard let connection else { return failRecording() }
        do {
            let replica = settings.replicaName
            let ids = try await withQueryTimeout(on: connection) {
                try await connection.withTransaction(logger: logger) { connection in
                    try await connection.query("SELECT pg_advisory_xact_lock(\(Self.writeLock))", logger: logger)
                    var ids: [Int64] = []
                    for made in batch {
                        let columns = FleetLogEntry.columns(for: made.payload)
                        let rows = try await connection.query(
                            """
                            INSERT INTO sdui_invalidation_log (kind, value, soft, replica, created_at)
                            VALUES (\(columns.kind), \(columns.value), \(columns.soft), \(replica), clock_timestamp())
                            RETURNING id
                            """,
                            logger: logger
                        )
                        for try await id in rows.decode(Int64.self) { ids.append(id) }
                    }
                    try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger)
                    return ids
                }
            }
            guard generation == self.generation else { return }
            // Kept only for an answer still waiting for it (a fleet prefetch's, to count who took it).
            for (made, id) in zip(batch, ids) where waiters[made.token] != nil { recordedIDs[made.token] = id }
            let tokens = recordingTokens
            recordingTokens = []
            execute(follower.recorded(ids: ids))
            for token in tokens { waiters.removeValue(forKey: token)?.resume(returning: .recorded) }
        } catch {
            connectionLost(generation, error)
        }
    }

    /// Runs `operation` on `connection`, closing the connection if it takes longer than ``Settings/queryTimeout``:
    /// the close fails the operation, and the connection's close reports it lost.
    private func withQueryTimeout<Result: Sendable>(
        on connection: PostgresConnection,
        _ operation: () async throws -> Result
    ) async throws -> Result {
        let limit = settings.queryTimeout
        let watchdog = Task {
            try await Task.sleep(for: limit)
            try? await connection.close()
        }
        defer { watchdog.cancel() }
        return try await operation()
    }

    /// The write in flight did not happen: its invalidations wait for the next connection, and their answers say
    /// so now.
    private func failRecording() {
        guard !recordingTokens.isEmpty else { return }
        for token in recordingTokens { waiters.removeValue(forKey: token)?.resume(returning: .pending) }
        recordingTokens = []
        follower.recordFailed()
    }

    private func heartbeat(_ generation: Int) async {
        guard let connection, generation == self.generation else { return }
        let applied = follower.appliedID ?? 0
        do {
            let seen = try await withQueryTimeout(on: connection) { () -> [Replica] in
                try await connection.query(
                    """
                    INSERT INTO sdui_replicas (name, applied_id, last_seen) VALUES (\(settings.replicaName), \(applied), now())
                    ON CONFLICT (name) DO UPDATE SET applied_id = excluded.applied_id, last_seen = excluded.last_seen
                    """,
                    logger: logger
                )
                let rows = try await connection.query(
                    """
                    SELECT name, applied_id, extract(epoch FROM now() - last_seen)::float8 FROM sdui_replicas
                    WHERE last_seen > now() - interval '1 minute' ORDER BY name
                    """,
                    logger: logger
                )
                var seen: [Replica] = []
                for try await (name, appliedID, age) in rows.decode((String, Int64, Double).self) {
                    seen.append(Replica(name: name, appliedID: appliedID, secondsSinceSeen: age))
                }
                return seen
            }
            guard generation == self.generation else { return }
            replicas = seen
            metrics?.cursor(applied)
        } catch {
            connectionLost(generation, error)
        }
    }

    /// Removes rows older than the retention, and replicas not seen for a day. Every replica tries; the one that
    /// holds the lock does it.
    private func prune(on connection: PostgresConnection) async {
        do {
            try await withQueryTimeout(on: connection) {
                try await Self.prune(olderThan: settings.retention, on: connection, logger: logger)
            }
        } catch {
            logger.warning(
                "could not prune the fleet's log",
                metadata: ["error": "\(PostgresErrorText.describe(error))"]
            )
        }
    }

    private func closeConnection() async {
        generation += 1
        if let connection {
            self.connection = nil
            try? await connection.close()
        }
    }

    // MARK: Applying

    private func apply(_ entries: [FleetLogEntry]) {
        var prefetched = false
        for entry in entries {
            switch entry.payload {
            case .invalidation(let invalidation):
                let reached = appliers.invalidate(invalidation)
                metrics?.applied(invalidation)
                logger.debug(
                    "applied a fleet invalidation",
                    metadata: ["id": "\(entry.id)", "invalidation": "\(invalidation)", "reached": "\(reached)"]
                )
            case .prefetch(let prefetch):
                appliers.prefetch(prefetch)
                prefetched = true
            case .unknown(let kind):
                let removed = appliers.invalidate(CacheInvalidation(.all))
                logger.warning(
                    "emptied the cache for a fleet log row of a kind this version does not know",
                    metadata: ["id": "\(entry.id)", "kind": "\(kind)", "removed": "\(removed)"]
                )
                metrics?.flushed()
            }
        }
        // The replica that asked for a prefetch waits to hear who took it.
        if prefetched { start(.heartbeat(generation: generation)) }
    }
}
