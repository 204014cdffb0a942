import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Where queued requests are kept until they reach a final outcome.
///
/// A store must be crash-safe: what ``insert(_:)`` wrote survives a crash as soon as it returns, and every
/// state change is atomic. Entries keep arrival order per route (the order of ``insert(_:)`` calls).
/// ``SQLiteQueueStore`` is the local implementation; a shared store (PostgreSQL) can implement the same protocol.
///
/// Errors are the store's own; ``WriteQueue`` maps them onto the error model.
public protocol QueueStore: Sendable {
    /// Writes a new pending entry; it is durable when this returns.
    ///
    /// With the entry, in the same atomic change: its ``QueueEntry/localId`` is recorded as pending (a create), and
    /// of `candidates` (the sane tokens its target and JSON body name) those that are local identifiers of creates
    /// it knows become its ``QueueEntry/dependsOn`` (the newest create of each). Returns those creates' ids.
    ///
    /// - Throws: ``LocalIdentifierConflict`` when its local identifier is pending already.
    @discardableResult
    func insert(_ entry: QueueEntry, naming candidates: [LocalIdentifier]) async throws -> [String]

    /// Whether other processes deliver from this store too: the counts a ``WriteQueue`` keeps in memory are then
    /// only estimates, and it asks the store instead.
    var isShared: Bool { get }

    /// The oldest pending entry of `route` in arrival order, whatever its next attempt time; nil when none.
    func firstPending(route: String) async throws -> QueueEntry?

    /// Claims the head of the sequential route `route` (its oldest pending entry) when it is due at `now` and no
    /// other deliverer holds it; else says when to look again.
    func claimHead(route: String, at now: QueueInstant) async throws -> QueueHeadClaim

    /// Claims the pending entries of `routes` whose next attempt is due at `now` and that no other deliverer
    /// holds, in arrival order, skipping the ids in `excluding` (this deliverer's deliveries in flight); at most
    /// `limit`.
    func claimDue(
        routes: [String],
        at now: QueueInstant,
        excluding: Set<String>,
        limit: Int
    ) async throws -> [QueueEntry]

    /// The earliest time at which a pending entry of `routes` outside `excluding` may be claimed (its next
    /// attempt, or the end of another deliverer's lease); nil when none.
    func earliestAttempt(routes: [String], excluding: Set<String>) async throws -> QueueInstant?

    /// Extends the claim on `id` while its delivery lasts; false when the claim was lost (another deliverer took
    /// the entry over, or it is not pending any more).
    func renewClaim(id: String) async throws -> Bool

    /// Gives up claims on entries that will not be delivered now (a stop before their delivery started).
    func releaseClaims(ids: [String]) async throws

    /// Records a failed attempt of a pending entry that will be tried again at `nextAttemptAt`, and releases its
    /// claim.
    func recordAttempt(
        id: String,
        attempts: Int,
        nextAttemptAt: QueueInstant,
        lastError: String,
        status: Int?
    ) async throws

    /// Records the final outcome of a pending entry: delivered with the backend's `status`, or failed with
    /// `lastError` (and the backend's last `status`, when it answered). The body and headers are let go. Returns
    /// false when the entry was not pending, or another deliverer took it over (its outcome is that one's to
    /// record). With `awaitingNotification`, the outcome is listed by ``unnotifiedOutcomes(limit:)`` until
    /// ``markNotified(id:)``, in the same atomic change. A create's backend identifier, or a dependent's failed
    /// create, goes with the outcome (`identifiers`).
    func finish(
        id: String,
        outcome: QueueConfiguration.Outcome,
        lastError: String?,
        status: Int?,
        attempts: Int,
        at time: QueueInstant,
        awaitingNotification: Bool,
        identifiers: QueueOutcomeIdentifiers
    ) async throws -> Bool

    /// Replaces a pending entry's request with `target`, `headers` and `body` (its local identifiers merged), and
    /// clears its ``QueueEntry/dependsOn``: from then on it is sent as rewritten, by this process or any other. False
    /// when it is not pending, or another deliverer holds it.
    func rewrite(id: String, target: String, headers: HTTPHeaders, body: ByteBuffer?) async throws -> Bool

    /// The creates with these queue ids, by id; an id the store does not hold (any more) is absent.
    func createRecords(ids: [String]) async throws -> [String: LocalIdentifierRecord]

    /// The newest create of `local`; nil when none is held.
    func identifierRecord(local: LocalIdentifier) async throws -> LocalIdentifierRecord?

    /// Every create pending or finished at `time` or later, oldest first: what a queue's ledger starts from.
    func identifierRecords(finishedSince time: QueueInstant) async throws -> [LocalIdentifierRecord]

    /// The creates of these local identifiers, oldest first: what a replica of a fleet asks before it forwards a
    /// write at once, since another replica may have accepted the create a moment ago.
    func identifierRecords(named locals: [LocalIdentifier]) async throws -> [LocalIdentifierRecord]

    /// Final outcomes whose webhook notification has not been sent or given up on, oldest first; at most `limit`.
    func unnotifiedOutcomes(limit: Int) async throws -> [QueueOutcomeEvent]

    /// Records that the outcome of `id` was notified, or given up on; it is not listed any more.
    func markNotified(id: String) async throws

    /// The state of the entry with `id`, pending or finished; nil when the store does not know it.
    func status(id: String) async throws -> QueueEntryStatus?

    /// Pending entries per route with the oldest's queue time, for routes that have any, sorted by route.
    func depths() async throws -> [QueueRouteDepth]

    /// How many entries are pending, over all routes.
    func pendingCount() async throws -> Int

    /// Forgets delivered and failed entries finished before `time`; returns how many. A shared store does it for one
    /// of its deliverers at a time, and answers 0 to the others.
    func removeFinished(before time: QueueInstant) async throws -> Int

    /// Releases the store; no call may follow.
    func close() async throws
}

extension QueueStore {
    /// Writes a new pending entry that names no local identifier.
    public func insert(_ entry: QueueEntry) async throws {
        try await insert(entry, naming: [])
    }

    /// An outcome without identifiers.
    public func finish(
        id: String,
        outcome: QueueConfiguration.Outcome,
        lastError: String?,
        status: Int?,
        attempts: Int,
        at time: QueueInstant,
        awaitingNotification: Bool
    ) async throws -> Bool {
        try await finish(
            id: id,
            outcome: outcome,
            lastError: lastError,
            status: status,
            attempts: attempts,
            at: time,
            awaitingNotification: awaitingNotification,
            identifiers: .none
        )
    }

    /// ``finish(id:outcome:lastError:status:attempts:at:awaitingNotification:identifiers:)`` for a delivery.
    public func markDelivered(
        id: String,
        status: Int,
        attempts: Int,
        at time: QueueInstant,
        awaitingNotification: Bool,
        remoteId: RemoteIdentifier? = nil
    ) async throws -> Bool {
        try await finish(
            id: id,
            outcome: .delivered,
            lastError: nil,
            status: status,
            attempts: attempts,
            at: time,
            awaitingNotification: awaitingNotification,
            identifiers: QueueOutcomeIdentifiers(remoteId: remoteId)
        )
    }

    /// ``finish(id:outcome:lastError:status:attempts:at:awaitingNotification:)`` for a request given up.
    public func markFailed(
        id: String,
        lastError: String,
        status: Int?,
        attempts: Int,
        at time: QueueInstant,
        awaitingNotification: Bool
    ) async throws -> Bool {
        try await finish(
            id: id,
            outcome: .failed,
            lastError: lastError,
            status: status,
            attempts: attempts,
            at: time,
            awaitingNotification: awaitingNotification
        )
    }
}

/// What ``QueueStore/claimHead(route:at:)`` found.
public enum QueueHeadClaim: Sendable {
    /// The head, claimed: deliver it.
    case claimed(QueueEntry)
    /// The route has no pending entry.
    case empty
    /// The head names local identifiers whose creates have no outcome yet: look again when one has.
    case waitingForCreates
    /// Look again at this time (on this process's clock): the head backs off, or another deliverer has it.
    case notBefore(QueueInstant)
}

/// A create whose local identifier is pending already (the client's 409).
public struct LocalIdentifierConflict: Error, Sendable, CustomStringConvertible {
    public var local: LocalIdentifier

    public init(local: LocalIdentifier) {
        self.local = local
    }

    public var description: String { "the local identifier \(local) is being created already" }
}

/// A store that cannot do what it was asked.
public struct QueueStoreError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public var message: String

    /// An error saying `message`.
    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
