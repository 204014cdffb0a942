import SDUIProxyCore

/// A create as the queue store keeps it: the local identifier it introduced, and what became of it.
///
/// The store keeps no table of its own for identifiers: a create's queue entry carries its local identifier, and
/// the backend's once delivered, so the identifier is recorded in the same write as the request, and kept as long
/// as the entry (`queue.retention`, longer while writes that depend on it wait).
public struct LocalIdentifierRecord: Sendable, Equatable {
    /// Where a create stands.
    public enum State: Sendable, Equatable {
        /// Not delivered yet.
        case pending
        /// Delivered; the backend's identifier, nil when its answer named none that can be used.
        case delivered(RemoteIdentifier?)
        /// Given up, for `reason`.
        case failed(reason: String)
    }

    /// The client's identifier.
    public var local: LocalIdentifier
    /// The queue id of the create.
    public var create: String
    public var state: State
    /// When the create reached its outcome; nil while pending.
    public var finishedAt: QueueInstant?

    public init(local: LocalIdentifier, create: String, state: State, finishedAt: QueueInstant? = nil) {
        self.local = local
        self.create = create
        self.state = state
        self.finishedAt = finishedAt
    }

    /// Why writes that name it cannot be sent, or nil when they can (it is pending, or merged).
    public var failure: String? {
        switch state {
        case .pending, .delivered(.some): nil
        case .delivered(.none): "the backend's answer to the create named no identifier that can be used"
        case .failed(let reason): reason
        }
    }

    /// The ledger's view of it, remembered for `retention` after its outcome.
    func standing(retention: Duration) -> LocalIdentifierLedger.Standing {
        let until = (finishedAt ?? .now()).advanced(by: retention)
        switch state {
        case .pending: return .pending(create: create, dependents: [])
        case .delivered(let remote?): return .merged(remote: remote, until: until)
        case .delivered(.none), .failed: return .failed(reason: failure ?? "", until: until)
        }
    }

    /// `{"localId", "create", "state", "remoteId"}`, with `"error"` when its dependents cannot be sent: the body
    /// of `GET /queue/identifiers/LOCAL`.
    public var json: String {
        var fields = [
            #""localId":\#(JSONText.quoted(local.value))"#,
            #""create":\#(JSONText.quoted(create))"#,
        ]
        switch state {
        case .pending:
            fields += [#""state":"pending""#, #""remoteId":null"#]
        case .delivered(let remote):
            fields.append(remote == nil ? #""state":"failed""# : #""state":"merged""#)
            fields.append(#""remoteId":\#(remote.map { JSONText.quoted($0.text) } ?? "null")"#)
        case .failed:
            fields += [#""state":"failed""#, #""remoteId":null"#]
        }
        if let failure { fields.append(#""error":\#(JSONText.quoted(failure))"#) }
        if let finishedAt { fields.append(#""finishedAt":"\#(finishedAt)""#) }
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// What a final outcome adds for identifiers: the backend's identifier a create's answer named, or the create whose
/// failure failed a dependent write.
public struct QueueOutcomeIdentifiers: Sendable, Equatable {
    /// A delivered create's backend identifier.
    public var remoteId: RemoteIdentifier?
    /// The create (queue id) a `dependencyFailed` write waited for.
    public var failedCreate: String?

    public init(remoteId: RemoteIdentifier? = nil, failedCreate: String? = nil) {
        self.remoteId = remoteId
        self.failedCreate = failedCreate
    }

    /// Nothing about identifiers.
    public static let none = QueueOutcomeIdentifiers()
}
