import NIOCore
import NIOHTTP1
import SDUIProxyCore
import SQLiteNIO

// Creates and the writes that name them: the columns a create's local identifier and a write's creates live in.
extension SQLiteQueueStore {
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

    static let recordColumns = "id, local_id, state, remote_id, remote_is_number, last_error, finished_at"

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

    static func record(_ row: SQLiteRow) throws -> LocalIdentifierRecord {
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
    static func jsonArray(_ values: [String]) -> String {
        "[" + values.map { JSONText.quoted($0) }.joined(separator: ",") + "]"
    }

    /// The queue ids in a JSON array column; none when it is NULL.
    static func ids(_ text: String?) throws -> [String] {
        guard let text else { return [] }
        guard let values = JSONStringValues.values(in: Array(text.utf8), maximumLength: 256) else {
            throw QueueStoreError("a list of queue ids is unreadable")
        }
        return values.map(\.text)
    }

}
