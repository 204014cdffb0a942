/// How one replica keeps up with the fleet's shared log, decided from what happened and returned as actions to run.
///
/// The replica applies every row after the last one it applied (its cursor), in id order: when told of a new row
/// (`NOTIFY`), on a timer (a notification can be lost, or dropped by a pooler), and after each reconnection. Rows
/// it wrote itself were applied when it wrote them and are skipped. Invalidations made while the log is
/// unreachable are applied here at once and kept, in order, to be written when it is back; past
/// ``maximumPending`` of them the replica cannot say which entries the others must drop, so it empties its cache and
/// writes one invalidation of everything instead. A cursor older than the rows the log has pruned cannot catch up
/// row by row: the replica empties its cache and starts from the log's head.
///
/// Rows must become visible in id order (their inserts are serialised), or a fetch could pass over a row that
/// commits after a later one; the I/O side guarantees it.
public struct FleetLogFollower: Sendable {
    public enum Action: Sendable, Equatable {
        /// Open the connection that listens for notifications, then report ``connected(head:prunedThrough:)``.
        case connect
        /// Report ``reconnectDue()`` after this long.
        case scheduleReconnect(after: Duration)
        /// Read the rows after this id, in id order, and report ``fetched(_:prunedThrough:)``.
        case fetch(after: Int64)
        /// Write these as rows, in this order, and report ``recorded(ids:)`` or ``recordFailed()``. One write is in
        /// flight at a time, so a replica's rows keep the order it made them in.
        case record([Made])
        /// Do what these rows say, in this order.
        case apply([FleetLogEntry])
        /// Remove every entry from this replica's cache, and log why.
        case flushCache(FlushReason)
    }

    public enum FlushReason: Sendable, Equatable, CustomStringConvertible {
        /// The log pruned rows this replica had not applied.
        case fellBehindRetention(appliedID: Int64, prunedThrough: Int64)
        /// More invalidations were made while the log was unreachable than are kept to be written.
        case tooManyPending(Int)
        /// The log's last id is below this replica's cursor: the database was replaced or restored.
        case logWentBack(appliedID: Int64, head: Int64)

        public var description: String {
            switch self {
            case .fellBehindRetention(let applied, let pruned):
                "the log pruned rows up to id \(pruned) before this replica applied them (it had applied \(applied))"
            case .tooManyPending(let limit):
                "more than \(limit) invalidations were made while PostgreSQL was unreachable"
            case .logWentBack(let applied, let head):
                "the log's last row is \(head), before the \(applied) this replica had applied: the database was replaced"
            }
        }
    }

    private enum Connection: Sendable, Equatable {
        case idle
        case connecting(failures: Int)
        case waitingToReconnect(failures: Int)
        case connected
    }

    /// The most invalidations kept while the log is unreachable.
    public let maximumPending: Int
    /// The first reconnection's delay, doubled on each failure that follows, up to ``maximumReconnectDelay``.
    public let firstReconnectDelay: Duration
    public let maximumReconnectDelay: Duration

    private var connection = Connection.idle
    /// The id of the last row applied; nil until the first connection, which starts the replica at the log's head:
    /// its cache was filled after every row before that.
    public private(set) var appliedID: Int64?
    private var fetching = false
    /// A notification or tick came while a fetch or a write ran: fetch when it ends.
    private var fetchAgain = false
    /// Invalidations not yet written, oldest first: the log is unreachable, or a write is in flight.
    private var pending: [Made] = []
    private var pendingOverflowed = false
    /// The write in flight.
    private var recording: [Made]?
    private var nextToken: UInt64 = 0
    /// Rows this replica wrote and the cursor has not passed.
    private var ownIDs: Set<Int64> = []

    public init(
        maximumPending: Int = 10_000,
        firstReconnectDelay: Duration = .milliseconds(100),
        maximumReconnectDelay: Duration = .seconds(2)
    ) {
        precondition(maximumPending > 0, "at least one pending invalidation must be kept")
        self.maximumPending = maximumPending
        self.firstReconnectDelay = firstReconnectDelay
        self.maximumReconnectDelay = maximumReconnectDelay
    }

    /// Whether the listening connection is up.
    public var isConnected: Bool { connection == .connected }

    /// How many invalidations wait to be written.
    public var pendingCount: Int { pendingOverflowed ? maximumPending + 1 : pending.count + (recording?.count ?? 0) }

    public mutating func start() -> [Action] {
        guard connection == .idle else { return [] }
        connection = .connecting(failures: 0)
        return [.connect]
    }

    /// The listening connection is up; `head` is the last id the log has given, `prunedThrough` the highest id
    /// pruned (0 for none).
    public mutating func connected(head: Int64, prunedThrough: Int64) -> [Action] {
        guard case .connecting = connection else { return [] }
        connection = .connected
        var actions: [Action] = []
        if let applied = appliedID {
            if prunedThrough > applied {
                actions.append(.flushCache(.fellBehindRetention(appliedID: applied, prunedThrough: prunedThrough)))
                appliedID = head
                ownIDs = []
            } else if head < applied {
                // The log is behind this replica's cursor: the database was replaced or restored. Rows from now
                // on start below the cursor, so it starts again from the head, with nothing known of before.
                actions.append(.flushCache(.logWentBack(appliedID: applied, head: head)))
                appliedID = head
                ownIDs = []
            }
        } else {
            appliedID = head
        }
        actions += recordIfIdle()
        actions += fetchIfIdle()
        return actions
    }

    /// Connecting failed, or the connection (or a query on it) was lost.
    public mutating func connectionLost() -> [Action] {
        let failures: Int
        switch connection {
        case .idle, .waitingToReconnect: return []
        case .connected: failures = 1
        case .connecting(let earlier): failures = earlier + 1
        }
        connection = .waitingToReconnect(failures: failures)
        fetching = false
        fetchAgain = false
        return [.scheduleReconnect(after: reconnectDelay(afterFailures: failures))]
    }

    public mutating func reconnectDue() -> [Action] {
        guard case .waitingToReconnect(let failures) = connection else { return [] }
        connection = .connecting(failures: failures)
        return [.connect]
    }

    /// A notification of a new row, or the poll timer.
    public mutating func rowsMayHaveArrived() -> [Action] {
        guard connection == .connected else { return [] }
        return fetchIfIdle()
    }

    /// The rows after the cursor, in id order, and the highest id pruned.
    public mutating func fetched(_ entries: [FleetLogEntry], prunedThrough: Int64) -> [Action] {
        guard fetching, var applied = appliedID else { return [] }
        fetching = false
        var actions: [Action] = []
        if prunedThrough > applied {
            // Rows after the cursor are gone unread (the id pruned last was a row): what they reached is unknown.
            actions.append(.flushCache(.fellBehindRetention(appliedID: applied, prunedThrough: prunedThrough)))
            applied = prunedThrough
        }
        var toApply: [FleetLogEntry] = []
        for entry in entries where entry.id > applied {
            if ownIDs.remove(entry.id) == nil { toApply.append(entry) }
            applied = entry.id
        }
        appliedID = applied
        ownIDs = ownIDs.filter { $0 > applied }
        if !toApply.isEmpty { actions.append(.apply(toApply)) }
        if fetchAgain { actions += fetchIfIdle() }
        return actions
    }

    /// One invalidation (or fleet prefetch) made here, to be written to the log; `token` names it in
    /// ``recorded(ids:)`` and ``recordFailed()``.
    public struct Made: Sendable, Equatable {
        public var token: UInt64
        public var payload: FleetLogEntry.Payload

        public init(token: UInt64, payload: FleetLogEntry.Payload) {
            self.token = token
            self.payload = payload
        }
    }

    /// An invalidation (or a fleet prefetch) made here, already applied here. It is written now when the log is
    /// reachable (`writing`), or kept to be written when it is back.
    public mutating func made(_ payload: FleetLogEntry.Payload) -> (token: UInt64, writing: Bool, actions: [Action]) {
        let made = makeRecord(payload)
        keepPending([made])
        return (made.token, connection == .connected && !pendingOverflowed, recordIfIdle())
    }

    /// The write in flight is done, with these ids.
    public mutating func recorded(ids: [Int64]) -> [Action] {
        guard recording != nil else { return [] }
        recording = nil
        for id in ids where id > (appliedID ?? .min) { ownIDs.insert(id) }
        let actions = recordIfIdle()
        return fetchAgain ? actions + fetchIfIdle() : actions
    }

    /// The write in flight failed: what it held is written on the next connection, ahead of anything made since.
    /// The connection is reported lost separately, when it is.
    public mutating func recordFailed() {
        guard let failed = recording else { return }
        recording = nil
        let later = pending
        pending = []
        keepPending(failed)
        keepPending(later)
    }

    /// The tokens of the invalidations not yet written.
    public var pendingTokens: [UInt64] { (recording ?? []).map(\.token) + pending.map(\.token) }

    private mutating func makeRecord(_ payload: FleetLogEntry.Payload) -> Made {
        nextToken += 1
        return Made(token: nextToken, payload: payload)
    }

    private mutating func keepPending(_ made: [Made]) {
        guard !pendingOverflowed else { return }
        pending += made
        if pending.count > maximumPending {
            pending = []
            pendingOverflowed = true
        }
    }

    private mutating func recordIfIdle() -> [Action] {
        guard connection == .connected, recording == nil else { return [] }
        var actions: [Action] = []
        if pendingOverflowed {
            pendingOverflowed = false
            actions.append(.flushCache(.tooManyPending(maximumPending)))
            pending = [makeRecord(.invalidation(CacheInvalidation(.all)))]
        }
        guard !pending.isEmpty else { return actions }
        let batch = pending
        pending = []
        recording = batch
        actions.append(.record(batch))
        return actions
    }

    /// A fetch, unless one runs or a write does: the log is read only while this replica knows the ids of all
    /// its rows, so none of its own is taken for another replica's.
    private mutating func fetchIfIdle() -> [Action] {
        guard connection == .connected, let applied = appliedID else { return [] }
        guard !fetching, recording == nil else {
            fetchAgain = true
            return []
        }
        fetching = true
        fetchAgain = false
        return [.fetch(after: applied)]
    }

    func reconnectDelay(afterFailures failures: Int) -> Duration {
        var delay = firstReconnectDelay
        for _ in 1..<max(1, failures) {
            delay *= 2
            if delay >= maximumReconnectDelay { return maximumReconnectDelay }
        }
        return min(delay, maximumReconnectDelay)
    }
}
