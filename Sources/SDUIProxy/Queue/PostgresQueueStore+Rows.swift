import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import SDUIProxyCore

// Reading a queue row into an entry, on this process's clock, and the log lines of claims that changed hands.
extension PostgresQueueStore {

    static let qualifiedEntryColumns = entryColumns.split(separator: ", ").map { "q." + $0 }.joined(
        separator: ", "
    )

    /// An entry as read (its times on this process's clock), with its lease and next attempt on the database's
    /// clock, and that clock's reading.
    struct ClaimedRow {
        var seq: Int64
        var entry: QueueEntry
        var nextAttemptOnDatabaseClock: Int64
        var lease: QueueClaimRules.Lease?
        var databaseNow: Int64
    }

    func claimedRow(_ row: PostgresRow) throws -> ClaimedRow {
        let (
            seq, id, route, method, target, headers, body, enqueuedAt, attempts, nextAttemptAt, lastError, status,
            localId, dependsOn, leaseOwner, leaseUntil, databaseNow
        ) = try row.decode(
            (
                Int64, String, String, String, String, ByteBuffer?, ByteBuffer?, Int64, Int, Int64, String?, Int?,
                String?, [String]?, String?, Int64?, Int64
            ).self
        )
        let entry = QueueEntry(
            id: id,
            route: route,
            method: HTTPMethod(rawValue: method),
            target: target,
            headers: try QueueEntry.decodeHeaders(headers),
            body: body,
            enqueuedAt: onLocalClock(enqueuedAt),
            attempts: attempts,
            nextAttemptAt: onLocalClock(nextAttemptAt),
            lastError: lastError,
            lastStatus: status,
            localId: localId.flatMap(LocalIdentifier.init),
            dependsOn: dependsOn ?? []
        )
        let lease = zip(leaseOwner, leaseUntil).map { QueueClaimRules.Lease(owner: $0, untilMilliseconds: $1) }
        return ClaimedRow(
            seq: seq,
            entry: entry,
            nextAttemptOnDatabaseClock: nextAttemptAt,
            lease: lease,
            databaseNow: databaseNow
        )
    }

    // MARK: Logs

    func logTakeOver(of entry: QueueEntry, from previousOwner: String) {
        logger.warning(
            "took over a queued request whose deliverer's lease ran out: it is sent again with the same Idempotency-Key",
            metadata: [
                "id": "\(entry.id)", "route": "\(entry.route)", "previousOwner": "\(previousOwner)",
                "attempts": "\(entry.attempts)",
            ]
        )
    }

    func logLostClaim(id: String, outcome: String) {
        logger.warning(
            "another replica took over a queued request during its delivery: \(outcome) is that replica's to record",
            metadata: ["id": "\(id)", "owner": "\(settings.owner)"]
        )
    }
}

private func zip<A, B>(_ first: A?, _ second: B?) -> (A, B)? {
    guard let first, let second else { return nil }
    return (first, second)
}
