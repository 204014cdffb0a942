import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import SQLiteNIO

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A ``QueueStore`` in one SQLite file (`queue.sqlite` in the store directory).
///
/// The database runs in WAL mode with `synchronous=FULL`: every statement is its own transaction, and a
/// commit is fsynced before the statement returns, so an inserted request survives a crash or power loss
/// from then on. Each call is a single statement, so no state change is ever half done.
public final class SQLiteQueueStore: QueueStore {
    /// The database file.
    public let path: String
    private let connection: SQLiteConnection
    /// Held while the store is open: one process per store.
    private let lock: QueueStoreLock

    private init(path: String, connection: SQLiteConnection, lock: QueueStoreLock) {
        self.path = path
        self.connection = connection
        self.lock = lock
    }

    /// The file name inside the store directory.
    public static let fileName = "queue.sqlite"

    /// Opens (creating it and its directory when missing) the store in `directory`.
    ///
    /// Only a missing database file makes a new store, and a new one is built under another name and renamed into
    /// place once it holds its schema: a `queue.sqlite` that exists has always held the queue. One that is empty,
    /// is not an SQLite database, or lacks the queue's table has lost what it held, and opening it fails with a
    /// ``QueueStoreError`` that names it and says what to do, rather than starting an empty queue over it.
    ///
    /// - Parameters:
    ///   - threadPool: where the blocking SQLite calls run.
    ///   - eventLoop: the loop the connection's futures complete on.
    public static func open(
        directory: String,
        threadPool: NIOThreadPool = .singleton,
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
        logger: Logger = Logger(label: "sdui-proxy.queue.store")
    ) async throws -> SQLiteQueueStore {
        try makeDirectory(directory)
        let lock = try QueueStoreLock.acquire(directory: directory)
        let path = directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
        let connection: SQLiteConnection
        do {
            if try !checkExisting(path) {
                try await create(path, threadPool: threadPool, eventLoop: eventLoop, logger: logger)
            }
            connection = try await SQLiteConnection.open(
                storage: .file(path: path),
                threadPool: threadPool,
                logger: logger,
                on: eventLoop
            )
        } catch {
            lock.release()
            throw error
        }
        do {
            try await checkSchema(connection, path: path)
            try await prepare(connection, path: path)
        } catch {
            try? await connection.close()
            lock.release()
            throw error
        }
        return SQLiteQueueStore(path: path, connection: connection, lock: lock)
    }

    /// Whether the database file at `path` exists: false when it does not (nor a write-ahead log of it).
    ///
    /// - Throws: ``QueueStoreError`` when it is empty or not a file, or when only its write-ahead log is left.
    private static func checkExisting(_ path: String) throws -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let code = errno
            guard code == ENOENT else { throw QueueStoreError("cannot read the queue store \(path) (errno \(code))") }
            // The log of a store whose file was moved away: a new file would take its frames as its own.
            var walInfo = stat()
            if stat(path + "-wal", &walInfo) == 0 {
                throw damaged(path, "is missing, but its write-ahead log \(path)-wal is still there")
            }
            return false
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw damaged(path, "is not a regular file") }
        guard info.st_size > 0 else { throw damaged(path, "is empty (0 bytes)") }
        return true
    }

    /// Builds a new store at `path`: under a temporary name, then renamed into place.
    private static func create(
        _ path: String,
        threadPool: NIOThreadPool,
        eventLoop: any EventLoop,
        logger: Logger
    ) async throws {
        let staging = path + ".new"
        // What a creation cut short left behind: never the queue, which is only ever at `path`.
        for leftover in [staging, staging + "-wal", staging + "-shm", staging + "-journal"] { unlink(leftover) }
        let connection = try await SQLiteConnection.open(
            storage: .file(path: staging),
            threadPool: threadPool,
            logger: logger,
            on: eventLoop
        )
        do {
            try await prepare(connection, path: staging)
        } catch {
            try? await connection.close()
            unlink(staging)
            throw error
        }
        // The last connection to close checkpoints the log into the file and removes it.
        try await connection.close()
        guard rename(staging, path) == 0 else {
            let code = errno
            unlink(staging)
            throw QueueStoreError("cannot create the queue store \(path) (rename failed, errno \(code))")
        }
        syncDirectory(of: path)
    }

    /// Refuses a file that is not an SQLite database, or one without the queue's table.
    private static func checkSchema(_ connection: SQLiteConnection, path: String) async throws {
        let tables: [SQLiteRow]
        do {
            tables = try await connection.query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'queued_requests'"
            )
        } catch {
            throw damaged(path, "is not a readable SQLite database (\(error))")
        }
        guard !tables.isEmpty else { throw damaged(path, "is an SQLite database without the queue's table") }
    }

    /// WAL mode, full sync, and the schema.
    private static func prepare(_ connection: SQLiteConnection, path: String) async throws {
        let mode = try await connection.query("PRAGMA journal_mode=WAL").first?.column("journal_mode")?.string
        guard mode?.lowercased() == "wal" else {
            throw QueueStoreError("cannot switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        for statement in schema {
            _ = try await connection.query(statement)
        }
        try await migrate(connection)
    }

    /// The error for a store file that exists and no longer holds the queue.
    private static func damaged(_ path: String, _ problem: String) -> QueueStoreError {
        QueueStoreError(
            """
            the queue store \(path) \(problem): the writes it held cannot be read, and it is not replaced by an \
            empty one. Restore it from a backup, or move it aside (with \(fileName)-wal and \(fileName)-shm if \
            present) to start with an empty queue
            """
        )
    }

    private static let schema = [
        "PRAGMA synchronous=FULL",
        """
        CREATE TABLE IF NOT EXISTS queued_requests (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            route TEXT NOT NULL,
            method TEXT NOT NULL,
            target TEXT NOT NULL,
            headers BLOB,
            body BLOB,
            enqueued_at INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
            attempts INTEGER NOT NULL,
            next_attempt_at INTEGER NOT NULL,
            last_error TEXT,
            status INTEGER,
            finished_at INTEGER,
            notify_pending INTEGER NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX IF NOT EXISTS queued_requests_pending ON queued_requests (route, seq) WHERE state = 'pending'",
        """
        CREATE INDEX IF NOT EXISTS queued_requests_due ON queued_requests (next_attempt_at, seq)
        WHERE state = 'pending'
        """,
        """
        CREATE INDEX IF NOT EXISTS queued_requests_finished ON queued_requests (finished_at)
        WHERE state <> 'pending'
        """,
    ]

    /// Brings a store made by an earlier version up to this schema: columns added since are added with their
    /// defaults, then the indexes over them are made.
    private static func migrate(_ connection: SQLiteConnection) async throws {
        let columns = try await connection.query("PRAGMA table_info(queued_requests)").compactMap {
            $0.column("name")?.string
        }
        if !columns.contains("notify_pending") {
            _ = try await connection.query(
                "ALTER TABLE queued_requests ADD COLUMN notify_pending INTEGER NOT NULL DEFAULT 0"
            )
        }
        _ = try await connection.query(
            """
            CREATE INDEX IF NOT EXISTS queued_requests_unnotified ON queued_requests (finished_at, seq)
            WHERE notify_pending = 1
            """
        )
        // Creates and the writes that name them: a create's local identifier (unique while it is pending) and the
        // backend's; a write's creates (a JSON array of queue ids), and the one whose failure failed it.
        let identifierColumns = [
            "local_id TEXT", "remote_id TEXT", "remote_is_number INTEGER NOT NULL DEFAULT 0", "depends_on TEXT",
            "dependency_failed TEXT",
        ]
        for column in identifierColumns where !columns.contains(String(column.prefix { $0 != " " })) {
            _ = try await connection.query("ALTER TABLE queued_requests ADD COLUMN \(column)")
        }
        _ = try await connection.query(
            """
            CREATE UNIQUE INDEX IF NOT EXISTS queued_requests_pending_local ON queued_requests (local_id)
            WHERE state = 'pending' AND local_id IS NOT NULL
            """
        )
        _ = try await connection.query(
            """
            CREATE INDEX IF NOT EXISTS queued_requests_local ON queued_requests (local_id, seq)
            WHERE local_id IS NOT NULL
            """
        )
    }

    /// Whether the entry `q` waits for a create that has no outcome yet.
    private static let waitsForCreate = """
        EXISTS (SELECT 1 FROM json_each(q.depends_on) AS d JOIN queued_requests AS c ON c.id = d.value
                WHERE c.state = 'pending')
        """

    private static let entryColumns =
        "id, route, method, target, headers, body, enqueued_at, attempts, next_attempt_at, last_error, status, "
        + "local_id, depends_on"

    // MARK: QueueStore

    public func insert(_ entry: QueueEntry, naming candidates: [LocalIdentifier]) async throws -> [String] {
        // The creates a write names: the newest create of each named local identifier, found in the same statement.
        let dependsOn =
            candidates.isEmpty
            ? "NULL"
            : """
            (SELECT NULLIF(json_group_array(c.id), '[]') FROM json_each(?) AS n
             JOIN queued_requests AS c ON c.seq = (SELECT max(seq) FROM queued_requests WHERE local_id = n.value))
            """
        var binds: [SQLiteData] = [
            .text(entry.id), .text(entry.route), .text(entry.method.rawValue), .text(entry.target),
            .blob(QueueEntry.encode(entry.headers)), entry.body.map { .blob($0) } ?? .null,
            .integer(Int(entry.enqueuedAt.millisecondsSinceEpoch)), .integer(entry.attempts),
            .integer(Int(entry.nextAttemptAt.millisecondsSinceEpoch)),
            entry.lastError.map { .text($0) } ?? .null, entry.lastStatus.map { .integer($0) } ?? .null,
            entry.localId.map { .text($0.value) } ?? .null,
        ]
        if !candidates.isEmpty { binds.append(.text(Self.jsonArray(candidates.map(\.value)))) }
        let rows: [SQLiteRow]
        do {
            rows = try await connection.query(
                """
                INSERT INTO queued_requests
                    (id, route, method, target, headers, body, enqueued_at, state, attempts, next_attempt_at,
                     last_error, status, local_id, depends_on)
                VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, \(dependsOn))
                RETURNING depends_on
                """,
                binds
            )
        } catch let error as SQLiteError where error.reason == .constraintUniqueFailed || error.reason == .constraint {
            if let local = entry.localId, "\(error)".contains("local_id") {
                throw LocalIdentifierConflict(local: local)
            }
            throw error
        }
        return try Self.ids(rows.first?.column("depends_on")?.string)
    }

    public func firstPending(route: String) async throws -> QueueEntry? {
        let rows = try await connection.query(
            """
            SELECT \(Self.entryColumns) FROM queued_requests
            WHERE state = 'pending' AND route = ? ORDER BY seq LIMIT 1
            """,
            [.text(route)]
        )
        return try rows.first.map(Self.entry)
    }

    /// Only this process delivers from the file (``QueueStoreLock``).
    public var isShared: Bool { false }

    /// The head when it is due: this process's single deliverer of the route needs no lease.
    public func claimHead(route: String, at now: QueueInstant) async throws -> QueueHeadClaim {
        let rows = try await connection.query(
            """
            SELECT \(Self.entryColumns), \(Self.waitsForCreate) AS waiting FROM queued_requests AS q
            WHERE state = 'pending' AND route = ? ORDER BY seq LIMIT 1
            """,
            [.text(route)]
        )
        guard let row = rows.first else { return .empty }
        if row.column("waiting")?.integer == 1 { return .waitingForCreates }
        let head = try Self.entry(row)
        return head.nextAttemptAt <= now ? .claimed(head) : .notBefore(head.nextAttemptAt)
    }

    /// The due entries: this process's single deliverer of the routes needs no lease.
    public func claimDue(
        routes: [String],
        at now: QueueInstant,
        excluding: Set<String>,
        limit: Int
    ) async throws -> [QueueEntry] {
        guard !routes.isEmpty, limit > 0 else { return [] }
        let (condition, binds) = Self.routeCondition(routes: routes, excluding: excluding)
        let rows = try await connection.query(
            """
            SELECT \(Self.entryColumns) FROM queued_requests AS q
            WHERE \(condition) AND next_attempt_at <= ? ORDER BY seq LIMIT ?
            """,
            binds + [.integer(Int(now.millisecondsSinceEpoch)), .integer(limit)]
        )
        return try rows.map(Self.entry)
    }

    public func earliestAttempt(routes: [String], excluding: Set<String>) async throws -> QueueInstant? {
        guard !routes.isEmpty else { return nil }
        let (condition, binds) = Self.routeCondition(routes: routes, excluding: excluding)
        let rows = try await connection.query(
            """
            SELECT next_attempt_at AS next FROM queued_requests AS q WHERE \(condition)
            ORDER BY next_attempt_at LIMIT 1
            """,
            binds
        )
        return rows.first?.column("next")?.integer.map { QueueInstant(millisecondsSinceEpoch: Int64($0)) }
    }

    public func renewClaim(id: String) async throws -> Bool { true }

    public func releaseClaims(ids: [String]) async throws {}

    public func recordAttempt(
        id: String,
        attempts: Int,
        nextAttemptAt: QueueInstant,
        lastError: String,
        status: Int?
    ) async throws {
        _ = try await connection.query(
            """
            UPDATE queued_requests SET attempts = ?, next_attempt_at = ?, last_error = ?, status = ?
            WHERE id = ? AND state = 'pending'
            """,
            [
                .integer(attempts), .integer(Int(nextAttemptAt.millisecondsSinceEpoch)), .text(lastError),
                status.map { .integer($0) } ?? .null, .text(id),
            ]
        )
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
        // The body and headers are not needed any more: only the status stays readable. A write whose create failed
        // is `failed` with the create named.
        let stored = state == .delivered ? "delivered" : "failed"
        let rows = try await connection.query(
            """
            UPDATE queued_requests
            SET state = ?, last_error = CASE WHEN ? THEN COALESCE(?, last_error) END, status = ?, attempts = ?,
                finished_at = ?,
                body = NULL, headers = NULL, notify_pending = ?, remote_id = ?, remote_is_number = ?,
                dependency_failed = ?
            WHERE id = ? AND state = 'pending' RETURNING seq
            """,
            [
                // A delivered request's earlier failures are history: its last error goes with them.
                .text(stored), .integer(state == .delivered ? 0 : 1), lastError.map { .text($0) } ?? .null,
                status.map { .integer($0) } ?? .null,
                .integer(attempts), .integer(Int(time.millisecondsSinceEpoch)), .integer(awaitingNotification ? 1 : 0),
                identifiers.remoteId.map { .text($0.text) } ?? .null,
                .integer(identifiers.remoteId?.isNumber == true ? 1 : 0),
                identifiers.failedCreate.map { .text($0) } ?? .null,
                .text(id),
            ]
        )
        return !rows.isEmpty
    }

    public func unnotifiedOutcomes(limit: Int) async throws -> [QueueOutcomeEvent] {
        let rows = try await connection.query(
            """
            SELECT id, route, state, status, attempts, last_error, local_id, remote_id, dependency_failed
            FROM queued_requests WHERE notify_pending = 1 ORDER BY finished_at, seq LIMIT ?
            """,
            [.integer(limit)]
        )
        return try rows.map { row in
            guard let id = row.column("id")?.string, let route = row.column("route")?.string,
                var outcome = row.column("state")?.string.flatMap(QueueConfiguration.Outcome.init(rawValue:))
            else { throw QueueStoreError("an outcome awaiting notification is unreadable") }
            let failedCreate = row.column("dependency_failed")?.string
            if failedCreate != nil { outcome = .dependencyFailed }
            return QueueOutcomeEvent(
                id: id,
                route: route,
                outcome: outcome,
                status: row.column("status")?.integer,
                attempts: row.column("attempts")?.integer ?? 0,
                error: outcome == .delivered ? nil : row.column("last_error")?.string,
                localId: row.column("local_id")?.string,
                remoteId: row.column("remote_id")?.string,
                failedCreate: failedCreate
            )
        }
    }

    public func markNotified(id: String) async throws {
        _ = try await connection.query("UPDATE queued_requests SET notify_pending = 0 WHERE id = ?", [.text(id)])
    }

    public func status(id: String) async throws -> QueueEntryStatus? {
        let rows = try await connection.query(
            """
            SELECT id, route, method, target, state, attempts, enqueued_at, next_attempt_at, finished_at, status,
                last_error, local_id, remote_id, depends_on, dependency_failed
            FROM queued_requests WHERE id = ?
            """,
            [.text(id)]
        )
        guard let row = rows.first else { return nil }
        guard var state = row.column("state")?.string.flatMap(QueueEntryStatus.State.init(rawValue:)) else {
            throw QueueStoreError("entry \(id) has an unknown state")
        }
        let failedCreate = row.column("dependency_failed")?.string
        if failedCreate != nil { state = .dependencyFailed }
        var status = QueueEntryStatus(
            id: try Self.text(row, "id"),
            route: try Self.text(row, "route"),
            method: try Self.text(row, "method"),
            target: try Self.text(row, "target"),
            state: state,
            attempts: try Self.integer(row, "attempts"),
            enqueuedAt: QueueInstant(millisecondsSinceEpoch: Int64(try Self.integer(row, "enqueued_at"))),
            nextAttemptAt: state == .pending
                ? QueueInstant(millisecondsSinceEpoch: Int64(try Self.integer(row, "next_attempt_at"))) : nil,
            finishedAt: row.column("finished_at")?.integer.map { QueueInstant(millisecondsSinceEpoch: Int64($0)) },
            status: row.column("status")?.integer,
            lastError: row.column("last_error")?.string
        )
        status.localId = row.column("local_id")?.string
        status.remoteId = row.column("remote_id")?.string
        status.waitsFor = try Self.ids(row.column("depends_on")?.string)
        status.failedCreate = failedCreate
        return status
    }

    public func rewrite(id: String, target: String, headers: HTTPHeaders, body: ByteBuffer?) async throws -> Bool {
        let rows = try await connection.query(
            """
            UPDATE queued_requests SET target = ?, headers = ?, body = ?, depends_on = NULL
            WHERE id = ? AND state = 'pending' RETURNING seq
            """,
            [.text(target), .blob(QueueEntry.encode(headers)), body.map { .blob($0) } ?? .null, .text(id)]
        )
        return !rows.isEmpty
    }

    private static let recordColumns = "id, local_id, state, remote_id, remote_is_number, last_error, finished_at"

    public func createRecords(ids: [String]) async throws -> [String: LocalIdentifierRecord] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT \(Self.recordColumns) FROM queued_requests
            WHERE local_id IS NOT NULL AND id IN (SELECT value FROM json_each(?))
            """,
            [.text(Self.jsonArray(ids))]
        )
        var records: [String: LocalIdentifierRecord] = [:]
        for row in rows {
            let record = try Self.record(row)
            records[record.create] = record
        }
        return records
    }

    public func identifierRecord(local: LocalIdentifier) async throws -> LocalIdentifierRecord? {
        let rows = try await connection.query(
            "SELECT \(Self.recordColumns) FROM queued_requests WHERE local_id = ? ORDER BY seq DESC LIMIT 1",
            [.text(local.value)]
        )
        return try rows.first.map(Self.record)
    }

    public func identifierRecords(named locals: [LocalIdentifier]) async throws -> [LocalIdentifierRecord] {
        guard !locals.isEmpty else { return [] }
        let rows = try await connection.query(
            """
            SELECT \(Self.recordColumns) FROM queued_requests
            WHERE local_id IN (SELECT value FROM json_each(?)) ORDER BY seq
            """,
            [.text(Self.jsonArray(locals.map(\.value)))]
        )
        return try rows.map(Self.record)
    }

    public func identifierRecords(finishedSince time: QueueInstant) async throws -> [LocalIdentifierRecord] {
        let rows = try await connection.query(
            """
            SELECT \(Self.recordColumns) FROM queued_requests
            WHERE local_id IS NOT NULL AND (state = 'pending' OR finished_at >= ?) ORDER BY seq
            """,
            [.integer(Int(time.millisecondsSinceEpoch))]
        )
        return try rows.map(Self.record)
    }

    public func depths() async throws -> [QueueRouteDepth] {
        let rows = try await connection.query(
            """
            SELECT route, COUNT(*) AS depth, MIN(enqueued_at) AS oldest FROM queued_requests
            WHERE state = 'pending' GROUP BY route ORDER BY route
            """
        )
        return try rows.map { row in
            QueueRouteDepth(
                route: try Self.text(row, "route"),
                depth: try Self.integer(row, "depth"),
                oldestEnqueuedAt: row.column("oldest")?.integer.map { QueueInstant(millisecondsSinceEpoch: Int64($0)) }
            )
        }
    }

    public func pendingCount() async throws -> Int {
        let rows = try await connection.query("SELECT COUNT(*) AS count FROM queued_requests WHERE state = 'pending'")
        guard let row = rows.first else { return 0 }
        return try Self.integer(row, "count")
    }

    public func removeFinished(before time: QueueInstant) async throws -> Int {
        let rows = try await connection.query(
            // A create stays while a write that depends on it waits: that write is rewritten, or failed, from it.
            """
            DELETE FROM queued_requests AS f WHERE state <> 'pending' AND finished_at < ?
            AND NOT (local_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM queued_requests AS q, json_each(q.depends_on) AS d
                WHERE q.state = 'pending' AND d.value = f.id))
            RETURNING seq
            """,
            [.integer(Int(time.millisecondsSinceEpoch))]
        )
        return rows.count
    }

    public func close() async throws {
        defer { lock.release() }
        try await connection.close()
    }

    /// Lets the store's lock go as the kernel does when the process dies, and leaves everything else as it is:
    /// for tests that play a crash and a restart in one process.
    func releaseLockAsProcessDeathWould() {
        lock.release()
    }

    /// The value of a pragma on this connection (`journal_mode`, `synchronous`), as text.
    func pragma(_ name: String) async throws -> String? {
        guard name.utf8.allSatisfy({ $0 == UInt8(ascii: "_") || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) })
        else { return nil }
        let rows = try await connection.query("PRAGMA \(name)")
        guard let data = rows.first?.columns.first?.data else { return nil }
        return data.string ?? data.integer.map(String.init)
    }

    // MARK: Rows

    private static func routeCondition(routes: [String], excluding: Set<String>) -> (String, [SQLiteData]) {
        // An entry that waits for a create is not due, whatever its time.
        var condition =
            "state = 'pending' AND route IN (\(Array(repeating: "?", count: routes.count).joined(separator: ", ")))"
            + " AND NOT \(waitsForCreate)"
        var binds = routes.map { SQLiteData.text($0) }
        if !excluding.isEmpty {
            condition += " AND id NOT IN (\(Array(repeating: "?", count: excluding.count).joined(separator: ", ")))"
            binds += excluding.sorted().map { .text($0) }
        }
        return (condition, binds)
    }

    private static func entry(_ row: SQLiteRow) throws -> QueueEntry {
        QueueEntry(
            id: try text(row, "id"),
            route: try text(row, "route"),
            method: HTTPMethod(rawValue: try text(row, "method")),
            target: try text(row, "target"),
            headers: try QueueEntry.decodeHeaders(row.column("headers")?.blob),
            body: row.column("body")?.blob,
            enqueuedAt: QueueInstant(millisecondsSinceEpoch: Int64(try integer(row, "enqueued_at"))),
            attempts: try integer(row, "attempts"),
            nextAttemptAt: QueueInstant(millisecondsSinceEpoch: Int64(try integer(row, "next_attempt_at"))),
            lastError: row.column("last_error")?.string,
            lastStatus: row.column("status")?.integer,
            localId: row.column("local_id")?.string.flatMap(LocalIdentifier.init),
            dependsOn: try ids(row.column("depends_on")?.string)
        )
    }

    private static func record(_ row: SQLiteRow) throws -> LocalIdentifierRecord {
        guard let local = row.column("local_id")?.string.flatMap(LocalIdentifier.init) else {
            throw QueueStoreError("a create's local identifier is unreadable")
        }
        let state: LocalIdentifierRecord.State
        switch try text(row, "state") {
        case "pending":
            state = .pending
        case "delivered":
            let remote = row.column("remote_id")?.string.flatMap {
                RemoteIdentifier($0, isNumber: row.column("remote_is_number")?.integer == 1)
            }
            state = .delivered(remote)
        default:
            state = .failed(reason: row.column("last_error")?.string ?? "the create failed")
        }
        return LocalIdentifierRecord(
            local: local,
            create: try text(row, "id"),
            state: state,
            finishedAt: row.column("finished_at")?.integer.map { QueueInstant(millisecondsSinceEpoch: Int64($0)) }
        )
    }

    /// A JSON array of strings; the strings are tokens, which need no escaping.
    private static func jsonArray(_ values: [String]) -> String {
        "[" + values.map { JSONText.quoted($0) }.joined(separator: ",") + "]"
    }

    /// The queue ids in a JSON array column; none when it is NULL.
    private static func ids(_ text: String?) throws -> [String] {
        guard let text else { return [] }
        guard let values = JSONStringValues.values(in: Array(text.utf8), maximumLength: 256) else {
            throw QueueStoreError("a list of queue ids is unreadable")
        }
        return values.map(\.text)
    }

    private static func text(_ row: SQLiteRow, _ column: String) throws -> String {
        guard let value = row.column(column)?.string else { throw QueueStoreError("column \(column) is missing") }
        return value
    }

    private static func integer(_ row: SQLiteRow, _ column: String) throws -> Int {
        guard let value = row.column(column)?.integer else { throw QueueStoreError("column \(column) is missing") }
        return value
    }

    /// `mkdir -p`.
    private static func makeDirectory(_ directory: String) throws {
        var path = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            path += "/" + component
            if mkdir(path, 0o750) != 0 {
                let code = errno
                var info = stat()
                guard code == EEXIST, stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                    throw QueueStoreError("cannot create the queue directory \(path) (errno \(code))")
                }
            }
        }
    }
}

/// Makes a rename in the directory of `path` durable; best effort.
private func syncDirectory(of path: String) {
    let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
    let descriptor = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY)
    guard descriptor >= 0 else { return }
    fsync(descriptor)
    close(descriptor)
}
