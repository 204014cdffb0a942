import NIOCore
import NIOHTTP1
import PostgresNIO
import SDUIProxyCore

// Creates and the writes that name them, and what `GET /queue/ID` reads: the columns migration 3 added.
extension PostgresQueueStore {
    /// Whether the entry `q` waits for a create that has no outcome yet.
    static let waitsForCreate =
        "EXISTS (SELECT 1 FROM sdui_queue AS c WHERE c.id = ANY(q.depends_on) AND c.state = 'pending')"

    /// Whether one of `entry`'s creates has no outcome yet.
    func waitsForCreates(_ entry: QueueEntry, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        guard !entry.dependsOn.isEmpty else { return false }
        let rows = try await connection.query(
            "SELECT EXISTS (SELECT 1 FROM sdui_queue WHERE id = ANY(\(entry.dependsOn)) AND state = 'pending')",
            logger: logger
        )
        for try await waiting in rows.decode(Bool.self) { return waiting }
        return false
    }

    /// Only the holder of the entry's lease rewrites it.
    public func rewrite(id: String, target: String, headers: HTTPHeaders, body: ByteBuffer?) async throws -> Bool {
        let owner = settings.owner
        return try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                UPDATE sdui_queue SET target = \(target), headers = \(QueueEntry.encode(headers)), body = \(body),
                  depends_on = NULL
                WHERE id = \(id) AND state = 'pending' AND lease_owner = \(owner) RETURNING seq
                """,
                logger: logger
            )
            for try await _ in rows { return true }
            return false
        }
    }

    public func createRecords(ids: [String]) async throws -> [String: LocalIdentifierRecord] {
        guard !ids.isEmpty else { return [:] }
        let records = try await identifierRecords(
            where: "local_id IS NOT NULL AND id = ANY($1)",
            bindings: { $0.append(ids) }
        )
        return Dictionary(records.map { ($0.create, $0) }, uniquingKeysWith: { first, _ in first })
    }

    public func identifierRecord(local: LocalIdentifier) async throws -> LocalIdentifierRecord? {
        try await identifierRecords(
            where: "local_id = $1",
            order: "seq DESC LIMIT 1",
            bindings: { $0.append(local.value) }
        ).first
    }

    public func identifierRecords(finishedSince time: QueueInstant) async throws -> [LocalIdentifierRecord] {
        let since = onDatabaseClock(time)
        return try await identifierRecords(
            where: "local_id IS NOT NULL AND (state = 'pending' OR finished_at >= $1)",
            bindings: { $0.append(since) }
        )
    }

    public func identifierRecords(named locals: [LocalIdentifier]) async throws -> [LocalIdentifierRecord] {
        guard !locals.isEmpty else { return [] }
        let names = locals.map(\.value)
        return try await identifierRecords(where: "local_id = ANY($1)", bindings: { $0.append(names) })
    }

    /// The creates `condition` selects (over `$1`, bound by `bindings`), in `order`.
    private func identifierRecords(
        where condition: String,
        order: String = "seq",
        bindings: (inout PostgresBindings) -> Void
    ) async throws -> [LocalIdentifierRecord] {
        var binds = PostgresBindings()
        bindings(&binds)
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT id, local_id, state, remote_id, remote_is_number, last_error, finished_at FROM sdui_queue
                WHERE \(condition) ORDER BY \(order)
                """,
            binds: binds
        )
        return try await withConnection { connection, logger in
            let rows = try await connection.query(query, logger: logger)
            var records: [LocalIdentifierRecord] = []
            for try await (id, localId, state, remoteId, remoteIsNumber, lastError, finishedAt) in rows.decode(
                (String, String, String, String?, Bool, String?, Int64?).self
            ) {
                guard let local = LocalIdentifier(localId) else {
                    throw QueueStoreError("the local identifier of \(id) is unreadable")
                }
                let recordState: LocalIdentifierRecord.State =
                    switch state {
                    case "pending": .pending
                    case "delivered": .delivered(remoteId.flatMap { RemoteIdentifier($0, isNumber: remoteIsNumber) })
                    default: .failed(reason: lastError ?? "the create failed")
                    }
                records.append(
                    LocalIdentifierRecord(
                        local: local,
                        create: id,
                        state: recordState,
                        finishedAt: finishedAt.map { self.onLocalClock($0) }
                    )
                )
            }
            return records
        }
    }

    public func status(id: String) async throws -> QueueEntryStatus? {
        try await withConnection { connection, logger in
            let rows = try await connection.query(
                """
                SELECT id, route, method, target, state, attempts, enqueued_at, next_attempt_at, finished_at, status,
                  last_error, local_id, remote_id, depends_on, dependency_failed
                FROM sdui_queue WHERE id = \(id)
                """,
                logger: logger
            )
            for try await (
                id, route, method, target, state, attempts, enqueuedAt, nextAttemptAt, finishedAt, status,
                lastError, localId, remoteId, dependsOn, failedCreate
            ) in rows.decode(
                (
                    String, String, String, String, String, Int, Int64, Int64, Int64?, Int?, String?, String?, String?,
                    [String]?, String?
                ).self
            ) {
                guard var state = QueueEntryStatus.State(rawValue: state) else {
                    throw QueueStoreError("entry \(id) has an unknown state")
                }
                if failedCreate != nil { state = .dependencyFailed }
                var entryStatus = QueueEntryStatus(
                    id: id,
                    route: route,
                    method: method,
                    target: target,
                    state: state,
                    attempts: attempts,
                    enqueuedAt: self.onLocalClock(enqueuedAt),
                    nextAttemptAt: state == .pending ? self.onLocalClock(nextAttemptAt) : nil,
                    finishedAt: finishedAt.map { self.onLocalClock($0) },
                    status: status,
                    lastError: lastError
                )
                entryStatus.localId = localId
                entryStatus.remoteId = remoteId
                entryStatus.waitsFor = dependsOn ?? []
                entryStatus.failedCreate = failedCreate
                return entryStatus
            }
            return nil
        }
    }
}
