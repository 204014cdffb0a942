import NIOCore
import NIOHTTP1
import SDUIProxy
import SDUIProxyCore
import Synchronization

/// A queue store whose first `failures` recordings of a delivery throw, as a store does while its disk is full
/// or remounted read-only; everything else goes to `base`.
final class FailingQueueStore: QueueStore {
    struct WriteFailed: Error {}

    private let base: any QueueStore
    private let failuresLeft: Mutex<Int>
    private let calls = Mutex(0)

    init(_ base: any QueueStore, failingMarkDelivered failures: Int) {
        self.base = base
        self.failuresLeft = Mutex(failures)
    }

    /// How many times a delivery was recorded, failed calls included.
    var markDeliveredCalls: Int { calls.withLock { $0 } }

    func finish(
        id: String,
        outcome: QueueConfiguration.Outcome,
        lastError: String?,
        status: Int?,
        attempts: Int,
        at time: QueueInstant,
        awaitingNotification: Bool,
        identifiers: QueueOutcomeIdentifiers
    ) async throws -> Bool {
        if outcome == .delivered {
            calls.withLock { $0 += 1 }
            let fails = failuresLeft.withLock { left -> Bool in
                defer { left = max(0, left - 1) }
                return left > 0
            }
            if fails { throw WriteFailed() }
        }
        return try await base.finish(
            id: id,
            outcome: outcome,
            lastError: lastError,
            status: status,
            attempts: attempts,
            at: time,
            awaitingNotification: awaitingNotification,
            identifiers: identifiers
        )
    }

    func insert(_ entry: QueueEntry, naming candidates: [LocalIdentifier]) async throws -> [String] {
        try await base.insert(entry, naming: candidates)
    }

    func rewrite(id: String, target: String, headers: HTTPHeaders, body: ByteBuffer?) async throws -> Bool {
        try await base.rewrite(id: id, target: target, headers: headers, body: body)
    }

    func createRecords(ids: [String]) async throws -> [String: LocalIdentifierRecord] {
        try await base.createRecords(ids: ids)
    }

    func identifierRecord(local: LocalIdentifier) async throws -> LocalIdentifierRecord? {
        try await base.identifierRecord(local: local)
    }

    func identifierRecords(finishedSince time: QueueInstant) async throws -> [LocalIdentifierRecord] {
        try await base.identifierRecords(finishedSince: time)
    }

    func identifierRecords(named locals: [LocalIdentifier]) async throws -> [LocalIdentifierRecord] {
        try await base.identifierRecords(named: locals)
    }

    var isShared: Bool { base.isShared }

    func firstPending(route: String) async throws -> QueueEntry? { try await base.firstPending(route: route) }

    func claimHead(route: String, at now: QueueInstant) async throws -> QueueHeadClaim {
        try await base.claimHead(route: route, at: now)
    }

    func renewClaim(id: String) async throws -> Bool { try await base.renewClaim(id: id) }

    func releaseClaims(ids: [String]) async throws { try await base.releaseClaims(ids: ids) }

    func claimDue(
        routes: [String],
        at now: QueueInstant,
        excluding: Set<String>,
        limit: Int
    ) async throws -> [QueueEntry] {
        try await base.claimDue(routes: routes, at: now, excluding: excluding, limit: limit)
    }

    func earliestAttempt(routes: [String], excluding: Set<String>) async throws -> QueueInstant? {
        try await base.earliestAttempt(routes: routes, excluding: excluding)
    }

    func recordAttempt(
        id: String,
        attempts: Int,
        nextAttemptAt: QueueInstant,
        lastError: String,
        status: Int?
    ) async throws {
        try await base.recordAttempt(
            id: id,
            attempts: attempts,
            nextAttemptAt: nextAttemptAt,
            lastError: lastError,
            status: status
        )
    }

    func unnotifiedOutcomes(limit: Int) async throws -> [QueueOutcomeEvent] {
        try await base.unnotifiedOutcomes(limit: limit)
    }

    func markNotified(id: String) async throws { try await base.markNotified(id: id) }

    func status(id: String) async throws -> QueueEntryStatus? { try await base.status(id: id) }

    func depths() async throws -> [QueueRouteDepth] { try await base.depths() }

    func pendingCount() async throws -> Int { try await base.pendingCount() }

    func removeFinished(before time: QueueInstant) async throws -> Int {
        try await base.removeFinished(before: time)
    }

    func close() async throws { try await base.close() }
}
