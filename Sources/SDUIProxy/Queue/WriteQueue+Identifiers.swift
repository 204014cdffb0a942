import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization

// Creates and the writes that name their local identifiers, on the request path and as their outcomes come.
extension WriteQueue {
    /// What a write on a queued route becomes before it is forwarded or queued.
    struct IdentifierPlan: Sendable {
        /// The request, with the backend's identifiers in place of local ones whose creates were delivered.
        var request: UpstreamRequest
        /// On a `creates` route: the local identifier it creates.
        var localId: LocalIdentifier?
        /// The tokens it names that are local identifiers of creates pending or failed: the store makes it depend
        /// on those creates (in a fleet, every token it names, since another replica may know more).
        var names: [LocalIdentifier]
        /// Whether it must be queued rather than forwarded at once: a create (recorded with the write, so that the
        /// writes behind it can wait for it), or a write that waits for a create.
        var mustQueue: Bool
    }

    /// The ledger at start: what the store holds of creates pending or finished within the retention.
    static func loadIdentifiers(
        configuration: QueueConfiguration,
        store: any QueueStore,
        logger: Logger
    ) async throws -> LocalIdentifierLedger? {
        guard configuration.routes.contains(where: { $0.creates != nil }) else { return nil }
        var ledger = LocalIdentifierLedger(retention: configuration.retention)
        let since = QueueInstant.now().advanced(by: .zero - configuration.retention)
        do {
            for record in try await store.identifierRecords(finishedSince: since) {
                ledger.remember(record.local, as: record.standing(retention: configuration.retention))
            }
        } catch  where store.isShared {
            // A fleet's replica asks the database about each write anyway (``identifierPlan(for:route:)``).
            logger.warning("cannot read the creates of the shared write queue yet", metadata: ["error": "\(error)"])
        }
        return ledger
    }

    /// Decides what becomes of `request` on `route`: the 400 of a create without a sane local identifier, the 409
    /// of one created twice, and for any write the local identifiers it names.
    ///
    /// A token is looked up in memory, one hash lookup each; with a shared store, the database is asked too about
    /// the tokens of a write it would not queue anyway (another replica may have accepted the create a moment ago).
    func identifierPlan(
        for request: UpstreamRequest,
        route: QueueConfiguration.Route
    ) async throws(ProxyError) -> IdentifierPlan {
        var plan = IdentifierPlan(request: request, localId: nil, names: [], mustQueue: route.creates != nil)
        guard tracksIdentifiers else { return plan }
        let body = Self.jsonBody(of: request)
        if let rule = route.creates {
            switch rule.localIdentifier(header: { request.fields.first(name: $0) }, body: body ?? []) {
            case .failure(let refusal): throw ProxyError(.badRequest, refusal.reason)
            case .success(let local):
                if case .conflict(let existing) = pendingCreate(of: local) {
                    throw Self.conflict(local, existing: existing)
                }
                plan.localId = local
            }
        }
        var candidates = IdentifierReferences.candidates(in: request.target)
        if let body { candidates += IdentifierReferences.candidates(inJSON: body).filter { !candidates.contains($0) } }
        candidates.removeAll { $0 == plan.localId }
        guard !candidates.isEmpty else { return plan }
        if store.isShared {
            // Queued writes are matched by the database in their insert; only a write forwarded at once is asked
            // about here.
            plan.names = candidates
            if !plan.mustQueue, route.ordering == .concurrent {
                try await rememberStoreRecords(of: candidates)
            }
        }
        var mapping: [LocalIdentifier: RemoteIdentifier] = [:]
        identifiers.withLock { ledger in
            for local in candidates {
                switch ledger.standings[local] {
                case .merged(let remote, _)?: mapping[local] = remote
                case .pending?, .failed?:
                    plan.mustQueue = true
                    if !store.isShared { plan.names.append(local) }
                case nil: continue
                }
            }
        }
        if !mapping.isEmpty {
            identifierMerges.add(1, ordering: .relaxed)
            plan.request = Self.merged(request, with: mapping, jsonBody: body)
            plan.names.removeAll { mapping[$0] != nil }
        }
        return plan
    }

    /// `request` with `mapping`'s backend identifiers in place of local ones: in the target, and in the body when
    /// it is JSON; `Content-Length` follows the body.
    static func merged(
        _ request: UpstreamRequest,
        with mapping: [LocalIdentifier: RemoteIdentifier],
        jsonBody: [UInt8]?
    ) -> UpstreamRequest {
        var merged = request
        merged.target = IdentifierReferences.rewritten(request.target, with: mapping)
        if let jsonBody, let rewritten = IdentifierReferences.rewritten(json: jsonBody, with: mapping) {
            merged.body = ByteBuffer(bytes: rewritten)
            if merged.fields.contains("content-length") {
                merged.fields.replaceOrAdd(name: "Content-Length", value: String(rewritten.count))
            }
        }
        return merged
    }

    /// The body's bytes when it is JSON (by its `Content-Type`): only a JSON body is searched and rewritten.
    static func jsonBody(of request: UpstreamRequest) -> [UInt8]? {
        guard let body = request.body, ComponentDecoder.isJSON(contentType: request.fields.first("content-type"))
        else { return nil }
        return Array(body.readableBytesView)
    }

    /// Whether `local` may be created now.
    func pendingCreate(of local: LocalIdentifier) -> LocalIdentifierLedger.CreateDecision {
        guard tracksIdentifiers else { return .record }
        return identifiers.withLock { ledger in
            if case .pending(let existing, _)? = ledger.standings[local] { return .conflict(existing: existing) }
            return .record
        }
    }

    static func conflict(_ local: LocalIdentifier, existing: String?) -> ProxyError {
        let which = existing.map { " (queued as \($0))" } ?? ""
        return ProxyError(
            .conflict,
            "the local identifier \(local) is being created already\(which); it can be created again once that has an outcome"
        )
    }

    /// Records a create accepted by this process.
    func createAccepted(_ local: LocalIdentifier, create: String) {
        identifiers.withLock { _ = $0.createAccepted(local, create: create) }
    }

    /// Records a create's outcome, and wakes the routes whose writes wait for it.
    func createFinished(_ record: LocalIdentifierRecord) {
        guard tracksIdentifiers else { return }
        let retention = configuration.retention
        identifiers.withLock { $0.remember(record.local, as: record.standing(retention: retention)) }
        signalAll()
    }

    /// Forgets identifiers merged or failed longer ago than the retention.
    func expireIdentifiers() {
        identifiers.withLock { $0.expire(at: .now()) }
    }

    /// The creates the store holds of `locals`, taken into the ledger: what other replicas accepted or delivered.
    func rememberStoreRecords(of locals: [LocalIdentifier]) async throws(ProxyError) {
        let records: [LocalIdentifierRecord]
        do {
            records = try await store.identifierRecords(named: locals)
        } catch {
            throw ProxyError(.unavailable, "the write queue cannot be read", detail: "\(error)")
        }
        let retention = configuration.retention
        identifiers.withLock { ledger in
            for record in records { ledger.remember(record.local, as: record.standing(retention: retention)) }
        }
    }

    /// The body of `GET /queue/identifiers/LOCAL`: the newest create of the local identifier, or 404.
    public func identifierStatus(_ text: String) async -> AdminResponse {
        guard let local = LocalIdentifier(text) else {
            return AdminResponse(ProxyError(.badRequest, LocalIdentifier.refusal(of: text)))
        }
        let record: LocalIdentifierRecord?
        do {
            record = try await store.identifierRecord(local: local)
        } catch {
            return AdminResponse(ProxyError(.internalError, "cannot read the write queue: \(error)"))
        }
        guard let record else {
            return AdminResponse(ProxyError(.notFound, "no queued create has the local identifier \(local)"))
        }
        return AdminResponse(json: record.json)
    }

    /// Local identifiers pending now, merges and `dependencyFailed` outcomes since start, for the metrics; nil
    /// when no route has `creates`.
    var identifierFigures: ProxyMetrics.Snapshot.QueueIdentifierFigures? {
        guard tracksIdentifiers else { return nil }
        let pending = identifiers.withLock { ledger in
            ledger.standings.values.reduce(0) { count, standing in
                if case .pending = standing { count + 1 } else { count }
            }
        }
        return .init(
            pending: pending,
            merges: identifierMerges.load(ordering: .relaxed),
            dependencyFailed: dependencyFailures.load(ordering: .relaxed)
        )
    }
}
