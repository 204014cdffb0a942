/// What the write queue knows of the local identifiers its creates introduced, and the decisions that follow:
/// whether a create may be accepted, whether a write waits for a create, is rewritten at once, or is free to go,
/// which writes a delivered create merges into, and which a failed one fails.
///
/// A local identifier is pending from its create's acceptance to the create's outcome; then it is merged (the
/// backend's identifier is known, and kept for the queue's retention so a write that still names the local one is
/// rewritten as it arrives) or failed (every write that depends on it ends `dependencyFailed`, and so does a
/// later one that names it, for the same retention). Queue entries are named by their ids; nothing here does I/O.
public struct LocalIdentifierLedger: Sendable {
    /// What became of a local identifier.
    public enum Standing: Sendable, Equatable {
        /// Its create (the queue entry `create`) has no outcome yet; `dependents` are the entries waiting for it.
        case pending(create: String, dependents: [String])
        /// Its create was delivered: `remote` stands in for it until `until`.
        case merged(remote: RemoteIdentifier, until: QueueInstant)
        /// Its create failed for good, for `reason`, remembered until `until`.
        case failed(reason: String, until: QueueInstant)
    }

    /// What to do with a create.
    public enum CreateDecision: Sendable, Equatable {
        /// Record the local identifier as pending, with the create.
        case record
        /// The identifier is pending already, for the create `existing`: a 409.
        case conflict(existing: String)
    }

    /// What to do with a write that names local identifiers.
    public struct WriteDecision: Sendable, Equatable {
        /// The identifiers to replace now (their creates were delivered).
        public var rewrite: [LocalIdentifier: RemoteIdentifier] = [:]
        /// The creates (queue entry ids) the write waits for; it is queued, whatever its route, until they have
        /// an outcome.
        public var waitsFor: [String] = []
        /// Why the write cannot be sent at all: a create it depends on failed.
        public var dependencyFailed: String?

        public init(
            rewrite: [LocalIdentifier: RemoteIdentifier] = [:],
            waitsFor: [String] = [],
            dependencyFailed: String? = nil
        ) {
            self.rewrite = rewrite
            self.waitsFor = waitsFor
            self.dependencyFailed = dependencyFailed
        }
    }

    /// How long a merged or failed identifier is remembered (`queue.retention`).
    public let retention: Duration
    public private(set) var standings: [LocalIdentifier: Standing] = [:]

    public init(retention: Duration) {
        self.retention = retention
    }

    /// The identifiers whose creates have no outcome yet: what an arriving write is searched for.
    public var pending: Set<LocalIdentifier> {
        Set(standings.compactMap { if case .pending = $0.value { $0.key } else { nil } })
    }

    /// Every identifier a write could name: pending, merged or failed.
    public var known: Set<LocalIdentifier> { Set(standings.keys) }

    /// A create that introduces `local` is being accepted as queue entry `create`.
    public mutating func createAccepted(_ local: LocalIdentifier, create: String) -> CreateDecision {
        if case .pending(let existing, _)? = standings[local] { return .conflict(existing: existing) }
        // A local identifier merged or failed before may be created again: it starts afresh.
        standings[local] = .pending(create: create, dependents: [])
        return .record
    }

    /// A write, queue entry `entry`, names `named` (found among ``known``): what it waits for or is rewritten with.
    /// It becomes a dependent of each pending create it names.
    public mutating func writeAccepted(_ entry: String, naming named: [LocalIdentifier]) -> WriteDecision {
        var decision = WriteDecision()
        for local in named {
            switch standings[local] {
            case .pending(let create, var dependents)?:
                if create == entry { continue }
                if !dependents.contains(entry) {
                    dependents.append(entry)
                    standings[local] = .pending(create: create, dependents: dependents)
                }
                if !decision.waitsFor.contains(create) { decision.waitsFor.append(create) }
            case .merged(let remote, _)?:
                decision.rewrite[local] = remote
            case .failed(let reason, _)?:
                decision.dependencyFailed = decision.dependencyFailed ?? "the create of \(local) failed: \(reason)"
            case nil:
                continue
            }
        }
        return decision
    }

    /// The create of `local` was delivered, and its answer named `remote`: the writes waiting for it, to be rewritten
    /// with it before their first delivery. Nothing when `local` was not pending.
    public mutating func createDelivered(
        _ local: LocalIdentifier,
        remote: RemoteIdentifier,
        at now: QueueInstant
    ) -> [String] {
        guard case .pending(_, let dependents)? = standings[local] else { return [] }
        standings[local] = .merged(remote: remote, until: now.advanced(by: retention))
        return dependents
    }

    /// The create of `local` failed for good (a 4xx, retries exhausted, or an answer with no backend identifier):
    /// the writes waiting for it, each to end `dependencyFailed`.
    public mutating func createFailed(_ local: LocalIdentifier, reason: String, at now: QueueInstant) -> [String] {
        guard case .pending(_, let dependents)? = standings[local] else { return [] }
        standings[local] = .failed(reason: reason, until: now.advanced(by: retention))
        return dependents
    }

    /// Takes what a store holds of `local` (a create accepted, delivered or failed by another process, or read at
    /// start) as its standing; a pending standing keeps the dependents already known.
    public mutating func remember(_ local: LocalIdentifier, as standing: Standing) {
        if case .pending(let create, _) = standing, case .pending(create, let dependents)? = standings[local] {
            standings[local] = .pending(create: create, dependents: dependents)
            return
        }
        standings[local] = standing
    }

    /// Forgets what was merged or failed longer ago than the retention; pending identifiers stay.
    public mutating func expire(at now: QueueInstant) {
        standings = standings.filter { _, standing in
            switch standing {
            case .pending: true
            case .merged(_, let until), .failed(_, let until): until > now
            }
        }
    }
}
