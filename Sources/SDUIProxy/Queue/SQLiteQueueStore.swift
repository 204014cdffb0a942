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
    let connection: SQLiteConnection
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

    /// Whether the entry `q` waits for a create that has no outcome yet.
    static let waitsForCreate = """
        EXISTS (SELECT 1 FROM json_each(q.depends_on) AS d JOIN queued_requests AS c ON c.id = d.value
                WHERE c.state = 'pending')
        """

    static let entryColumns =
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

    static func routeCondition(routes: [String], excluding: Set<String>) -> (String, [SQLiteData]) {
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

    static func entry(_ row: SQLiteRow) throws -> QueueEntry {
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

    static func text(_ row: SQLiteRow, _ column: String) throws -> String {
        guard let value = row.column(column)?.string else { throw QueueStoreError("column \(column) is missing") }
        return value
    }

    static func integer(_ row: SQLiteRow, _ column: String) throws -> Int {
        guard let value = row.column(column)?.integer else { throw QueueStoreError("column \(column) is missing") }
        return value
    }
}
