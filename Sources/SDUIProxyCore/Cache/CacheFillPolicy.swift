import NIOCore
import NIOHTTP1

/// What a cache fill decides, without I/O: whether the backend's answer is stored, whether the stale entry the
/// fill replaces stands in for a failing backend (RFC 5861 section 4) or goes, what a coalesced waiter makes of
/// its leader's outcome, and which requests may share an exchange at all (RFC 9111 section 3.5).
///
/// The fetcher makes one for each fill, from the client's request, and only does what it says: the rules live
/// here once, where every case can be tested without a backend.
public struct CacheFillPolicy: Sendable {
    /// The client's request headers: `Authorization` and a request `no-store` keep an answer out of the cache,
    /// and `Vary` selects the variant a waiter may take.
    public let requestHeaders: HTTPHeaders
    /// Which of the fields the cache path asks about `requestHeaders` carries.
    public let requestFields: RequestFieldPresence
    /// The route's lifetime, in seconds, for answers that carry no freshness information (0 leaves them out).
    public let defaultTTL: Int64
    /// The stale entry the fill replaces, if any: revalidated, standing in for a failing backend, or dropped.
    public let staleEntry: CachedResponse?
    /// The operator's cache-wide rules: targeted fields, heuristics, the cap on errors, `Set-Cookie`.
    public let rules: StorageRules

    /// - Parameter requestFields: which fields the cache path asks about `requestHeaders` carries, when the
    ///   router noted them; nil to find them here.
    public init(
        requestHeaders: HTTPHeaders,
        requestFields: RequestFieldPresence? = nil,
        defaultTTL: Int64,
        staleEntry: CachedResponse?,
        rules: StorageRules
    ) {
        self.requestHeaders = requestHeaders
        self.requestFields = requestFields ?? RequestFieldPresence(requestHeaders)
        self.defaultTTL = defaultTTL
        self.staleEntry = staleEntry
        self.rules = rules
    }

    // MARK: Authorization

    /// Whether a response may be stored, and so handed to other clients, as far as `Authorization` goes (RFC
    /// 9111 section 3.5): a response to a request without it may; one to a request with it only when the
    /// response says `public`, `s-maxage` or `must-revalidate`, the backend's word that the credentials did not
    /// shape it.
    public static func authorizationPermitsSharing(requestHasAuthorization: Bool, directives: CacheControl) -> Bool {
        !requestHasAuthorization || directives.isPublic || directives.sharedMaxAge != nil || directives.mustRevalidate
    }

    /// Whether a request may lead or join a coalesced exchange. One with `Authorization` may not: waiters join
    /// before the answer is read, so whether the answer permits sharing (``authorizationPermitsSharing``) is
    /// not known when they would have to be turned away; and a waiter's own credentials may be answered
    /// differently.
    public static func mayCoalesce(requestHeaders: HTTPHeaders) -> Bool {
        !requestHeaders.contains(name: "authorization")
    }

    /// Whether a GET may share the backend's answer streamed to other clients (a response too large to store).
    /// Such a stream forwards the first client's request as it came, so only requests whose forwarded headers
    /// ask for the same answer share it: one that may coalesce, and asks for no range and sets no condition
    /// (its answer may be a 206 or a 304 the others did not ask for).
    public static func mayShareStream(requestHeaders: HTTPHeaders) -> Bool {
        mayCoalesce(requestHeaders: requestHeaders)
            && !Self.streamSpecificHeaders.contains { requestHeaders.contains(name: $0) }
    }

    private static let streamSpecificHeaders = [
        "range", "if-range", "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "beagle-hash",
    ]

    /// What of a forwarded request must be the same for two clients to share its streamed answer: every field
    /// as it goes upstream, but those that only say who the client is (`X-Forwarded-For`, `Forwarded`,
    /// `X-Real-IP`) or which request and trace this is (`X-Request-Id`, `traceparent`, `tracestate`), in order,
    /// names in lower case. Two requests that differ in a cookie, an encoding they accept or the host they asked
    /// for do not share.
    public static func streamSharingIdentity(upstreamFields: HTTPFieldLines) -> String {
        var identity: [UInt8] = []
        identity.reserveCapacity(upstreamFields.byteCount + 2 * upstreamFields.count)
        upstreamFields.forEachField { name, value in
            guard !isClientOrRequestSpecific(name) else { return }
            identity.append(contentsOf: name.lazy.map(HTTPSyntax.lowercasedASCII))
            identity.append(UInt8(ascii: ":"))
            identity.append(contentsOf: value)
            identity.append(UInt8(ascii: "\n"))
        }
        return String(decoding: identity, as: UTF8.self)
    }

    /// Whether a forwarded request's field `name` only says who the client is or which request and trace this is.
    private static func isClientOrRequestSpecific(_ name: UnsafeRawBufferPointer) -> Bool {
        HTTPSyntax.equalsIgnoringCase(bytes: name, "x-forwarded-for")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "forwarded")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "x-real-ip")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "x-request-id")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "traceparent")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "tracestate")
    }

    /// Whether the backend's answer, streamed to the first client of a shared stream, may also go to the others
    /// that sent the same request: not one that answers the first one's credentials or keeps state for it (401,
    /// 403, 407, `private`, `Set-Cookie`: a new session cookie must not reach two clients), nor one that varies
    /// on more than the request (`Vary: *`). The others then ask the backend alone.
    public static func mayShareStreamedResponse(status: HTTPResponseStatus, headers: HTTPHeaders) -> Bool {
        let code = status.code
        guard code != 401, code != 403, code != 407, !headers.contains(name: "set-cookie") else { return false }
        let fields = HTTPFieldLines(headers)
        return !CacheControl(fields: fields).isPrivate && !FreshnessPolicy.variesOnEverything(fields)
    }

    /// Whether a request may be answered from what is stored. One with `Authorization` may not: the stored
    /// answer was made for other credentials, or none, and this proxy does not revalidate it on the client's
    /// behalf; it fetches alone.
    public static func mayAnswerFromCache(requestHeaders: HTTPHeaders) -> Bool {
        mayAnswerFromCache(RequestFieldPresence(requestHeaders))
    }

    /// ``mayAnswerFromCache(requestHeaders:)`` for the fields the router found.
    public static func mayAnswerFromCache(_ fields: RequestFieldPresence) -> Bool {
        !fields.contains(.authorization)
    }

    // MARK: Stale-if-error

    /// How the backend failed a fill.
    public enum Failure: Sendable, Equatable {
        /// No usable answer: the exchange's error (a network failure, a timeout, an answer too large or not a
        /// valid component), or the reason a coalesced leader's stale entry stood in; as it is logged.
        case error(String)
        /// The backend answered with this status; only a server error (5xx) is a failure.
        case status(UInt)

        /// Why a stale entry stands in, for the log and the outcome.
        public var reason: String {
            switch self {
            case .error(let description): description
            case .status(let code): "backend status \(code)"
            }
        }

        /// Whether the backend failed: every error, and a 5xx status.
        public var isFailure: Bool {
            switch self {
            case .error: true
            case .status(let code): code >= 500
            }
        }
    }

    /// The reason the stale entry stands in for the failed backend, or nil when it may not: there is none, it is
    /// an error itself (a stale 404 or 503 is no better an answer than the failure, and `cache.maxErrorTTL`
    /// bounds how long errors are served), the backend did not fail, or the entry's `stale-if-error` window (its
    /// own, else the route's) has passed at `now`.
    public func staleStandIn(after failure: Failure, at now: NIODeadline) -> String? {
        guard failure.isFailure, let staleEntry, staleEntry.status.code < 400, staleEntry.mayServeOnError(at: now)
        else { return nil }
        return failure.reason
    }

    // MARK: The backend's answer

    /// What to do first with the backend's answer.
    public enum AnswerStep: Sendable, Equatable {
        /// A 304 for the stale entry: refresh it (RFC 9111 section 4.3.4), deciding with ``revalidatedDecision``.
        case revalidate
        /// The backend failed and the stale entry stands in; the answer is not looked at further.
        case standIn(because: String)
        /// Validate the answer when ``validatesBody`` says so, then decide with ``storeDecision``.
        case decide
    }

    /// What to do first with an answer of `status`, received at `now`. Without a stale entry every answer is
    /// decided on its own: a 304 to an unconditional request is not storable, and a 5xx may be (a 501).
    public func firstStep(for status: HTTPResponseStatus, at now: NIODeadline) -> AnswerStep {
        guard staleEntry != nil else { return .decide }
        if status == .notModified { return .revalidate }
        if let reason = staleStandIn(after: .status(status.code), at: now) { return .standIn(because: reason) }
        return .decide
    }

    /// Whether an answer's body is validated as a component before it is stored: a success in JSON, on a route
    /// that validates. An error page or a non-JSON asset is passed through as the backend sent it.
    public static func validatesBody(
        status: HTTPResponseStatus,
        fields: HTTPFieldLines,
        routeValidatesComponents: Bool
    ) -> Bool {
        guard routeValidatesComponents, (200..<300).contains(status.code) else { return false }
        return fields.firstValue(of: "content-type", satisfies: { ComponentDecoder.isJSON(contentType: $0) })
    }

    // MARK: Storing

    /// Whether the answer is stored.
    public enum StoreDecision: Sendable, Equatable {
        /// Store it, fresh for `lifetime` seconds.
        case store(lifetime: Int64)
        /// Do not store it (`reason` is for the log). With `dropsStaleEntry`, the stale entry the fill replaces
        /// goes too, so it is not served stale later.
        case doNotStore(reason: String, dropsStaleEntry: Bool)
    }

    /// Whether the backend's answer is stored, and for how long.
    ///
    /// - Parameter directives: the answer's deciding directives (``StorageRules/directives(of:)``), when the caller
    ///   has read them already.
    public func storeDecision(
        status: HTTPResponseStatus,
        fields: HTTPFieldLines,
        directives: CacheControl? = nil
    ) -> StoreDecision {
        decision(status: status, fields: fields, directives: directives, reason: nil)
    }

    /// ``storeDecision(status:fields:directives:)`` for the stale entry refreshed by a 304: its status, with
    /// the headers the 304 updated.
    public func revalidatedDecision(
        status: HTTPResponseStatus,
        mergedFields: HTTPFieldLines,
        directives: CacheControl? = nil
    ) -> StoreDecision {
        decision(
            status: status,
            fields: mergedFields,
            directives: directives,
            reason: "revalidated, no longer storable"
        )
    }

    private func decision(
        status: HTTPResponseStatus,
        fields: HTTPFieldLines,
        directives: CacheControl?,
        reason fixedReason: String?
    ) -> StoreDecision {
        let decision = FreshnessPolicy.decide(
            requestHeaders: requestHeaders,
            requestFields: requestFields,
            status: status,
            responseFields: fields,
            defaultTTL: defaultTTL,
            rules: rules,
            cacheControl: directives
        )
        switch decision {
        case .store(let lifetime):
            return .store(lifetime: lifetime)
        case .doNotStore(let reason):
            return .doNotStore(
                reason: fixedReason ?? reason,
                dropsStaleEntry: dropsStaleEntry(status: status, fields: fields, directives: directives)
            )
        }
    }

    /// Whether an answer that is not stored takes the stale entry with it. Not when the request is what kept
    /// the answer out (its own `no-store`, its `Authorization`): one client's request removes nothing that
    /// other clients are served. So the answer is decided again as if the request had sent no headers.
    private func dropsStaleEntry(status: HTTPResponseStatus, fields: HTTPFieldLines, directives: CacheControl?) -> Bool
    {
        guard staleEntry != nil else { return false }
        let forOthers = FreshnessPolicy.decide(
            requestHeaders: HTTPHeaders(),
            requestFields: [],
            status: status,
            responseFields: fields,
            defaultTTL: defaultTTL,
            rules: rules,
            cacheControl: directives
        )
        if case .store = forOthers { return false }
        return true
    }

    // MARK: Coalesced waiters

    /// What a coalesced run's leader produced, as its waiters see it.
    public enum LeaderOutcome: Sendable {
        /// An entry: stored, or revalidated.
        case entry(CachedResponse)
        /// The leader's stale entry stood in for the failed backend.
        case servedStale(CachedResponse, because: String)
        /// An answer that was not stored.
        case notStored(status: HTTPResponseStatus, fields: HTTPFieldLines)
    }

    /// What a waiter does with its leader's outcome.
    public enum WaiterStep: Sendable, Equatable {
        /// The backend failed the leader, and the waiter's own stale entry stands in: the failing backend is
        /// not asked again.
        case standIn(because: String)
        /// The leader's outcome is the waiter's too.
        case take
        /// The waiter makes its own exchange.
        case fetchAlone
    }

    /// What the waiter this policy was made for does with `leader`, at `now`.
    ///
    /// The leader may have had no stale entry of this waiter's variant (another variant's miss), so a failure
    /// is met with the waiter's own stale entry first. Otherwise the waiter takes only what every client could
    /// have received: an entry of its own variant, or an error status that is not private and does not depend
    /// on who asked.
    public func waiterStep(after leader: LeaderOutcome, at now: NIODeadline) -> WaiterStep {
        if let failure = Self.failure(of: leader), let reason = staleStandIn(after: failure, at: now) {
            return .standIn(because: reason)
        }
        return mayTake(leader) ? .take : .fetchAlone
    }

    /// How the backend failed the leader, when it did: a 5xx not stored, or an error its stale entry stood in
    /// for.
    private static func failure(of leader: LeaderOutcome) -> Failure? {
        switch leader {
        case .notStored(let status, _) where status.code >= 500: .status(status.code)
        // A server error the leader stored (it said how long to keep it) is the backend failing all the same.
        case .entry(let entry) where entry.status.code >= 500: .status(entry.status.code)
        case .servedStale(_, let reason): .error(reason)
        case .entry, .notStored: nil
        }
    }

    private func mayTake(_ leader: LeaderOutcome) -> Bool {
        switch leader {
        case .entry(let entry), .servedStale(let entry, _):
            return entry.varyNames.isEmpty
                || ResponseCache.variantValue(names: entry.varyNames, requestHeaders: requestHeaders) == entry.variant
        case .notStored(let status, let fields):
            // 401, 403 and 407 answer the leader's credentials (a cookie, say), which a waiter's may not share.
            let code = status.code
            guard code >= 400, code != 401, code != 403, code != 407 else { return false }
            return !CacheControl(fields: fields).isPrivate && !fields.contains("set-cookie")
        }
    }
}
