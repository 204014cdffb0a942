import NIOHTTP1

/// Whether a response may be stored by a shared cache, and for how long it stays fresh (RFC 9111 sections 3
/// and 4.2): explicit freshness, else heuristic freshness, else the route's configured default lifetime as the
/// opt-in fallback for backends that send neither. `Pragma` in a response means nothing (RFC 9111 section 5.4).
public enum FreshnessPolicy {
    /// Statuses whose responses may be given a heuristic lifetime (RFC 9110 section 15.1).
    public static let heuristicallyCacheableStatuses: Set<UInt> = [
        200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501,
    ]

    /// The final statuses RFC 9110 section 15 defines: what `must-understand` lets this cache store.
    public static let understoodStatuses: Set<UInt> = Set(
        Array(200...206) + Array(300...305) + [307, 308] + Array(400...417) + [421, 422, 426] + Array(500...505)
    )

    /// What to do with a response.
    public enum Decision: Equatable, Sendable {
        /// Store it, fresh for `lifetime` seconds.
        case store(lifetime: Int64)
        /// Do not store it; `reason` is for logs.
        case doNotStore(reason: String)
    }

    /// Decides for a response to a GET.
    ///
    /// - Parameters:
    ///   - requestHeaders: the client's request headers (`Authorization` restricts what may be stored).
    ///   - requestFields: which fields the cache path asks about `requestHeaders` carries, when the router noted
    ///     them; nil to find them here, in one walk.
    ///   - status: the response status.
    ///   - responseFields: the response's header fields.
    ///   - defaultTTL: lifetime in seconds for responses with neither explicit nor heuristic freshness; 0 leaves
    ///     them unstored.
    ///   - rules: the operator's cache-wide rules.
    ///   - cacheControl: the directives that decide (``StorageRules/directives(of:)``), when the caller has
    ///     read them already.
    ///   - now: the time the response was received, in seconds, for a response without `Date`.
    public static func decide(
        requestHeaders: HTTPHeaders,
        requestFields: RequestFieldPresence? = nil,
        status: HTTPResponseStatus,
        responseFields: HTTPFieldLines,
        defaultTTL: Int64,
        rules: StorageRules,
        cacheControl: CacheControl? = nil,
        now: Int64 = HTTPDate.now()
    ) -> Decision {
        let cacheControl = cacheControl ?? rules.directives(of: responseFields)
        let code = status.code
        // Any final status may be stored (RFC 9111 section 3), registered or not; a 206 holds part of a
        // representation and a 304 none of it, so neither stands for the whole.
        guard code >= 200 else { return .doNotStore(reason: "interim status \(code)") }
        if code == 206 || code == 304 { return .doNotStore(reason: "status \(code)") }
        if cacheControl.mustUnderstand {
            // RFC 9111 section 5.2.2.3: a cache that understands the status stores it, and `no-store` is there
            // for caches that do not; one it does not understand is never stored.
            guard understoodStatuses.contains(code) else {
                return .doNotStore(reason: "must-understand, status \(code)")
            }
        } else if cacheControl.noStore {
            return .doNotStore(reason: "no-store")
        }
        if cacheControl.isPrivate { return .doNotStore(reason: "private") }
        let requestFields = requestFields ?? RequestFieldPresence(requestHeaders)
        if requestFields.contains(.cacheControl), CacheControl(headers: requestHeaders).noStore {
            return .doNotStore(reason: "request no-store")
        }
        if !CacheFillPolicy.authorizationPermitsSharing(
            requestHasAuthorization: requestFields.contains(.authorization),
            directives: cacheControl
        ) {
            return .doNotStore(reason: "authorization")
        }
        if !rules.storesSetCookie, responseFields.contains("set-cookie") { return .doNotStore(reason: "set-cookie") }
        if variesOnEverything(responseFields) { return .doNotStore(reason: "vary *") }
        // A response that must be validated before every use is only worth keeping when it can be validated.
        let hasValidator = responseFields.contains("etag") || responseFields.contains("last-modified")
        if cacheControl.noCache {
            return hasValidator ? .store(lifetime: 0) : .doNotStore(reason: "no-cache without a validator")
        }
        if let lifetime = explicitLifetime(cacheControl: cacheControl, fields: responseFields) {
            let capped = capped(lifetime, status: code, rules: rules)
            if capped > 0 || hasValidator { return .store(lifetime: capped) }
            return .doNotStore(reason: "already stale")
        }
        if let lifetime = heuristicLifetime(
            status: code,
            cacheControl: cacheControl,
            fields: responseFields,
            rules: rules,
            now: now
        ) {
            return .store(lifetime: capped(lifetime, status: code, rules: rules))
        }
        if defaultTTL > 0, status == .ok { return .store(lifetime: defaultTTL) }
        return .doNotStore(reason: "no freshness information")
    }

    /// `lifetime`, no longer than the operator allows a stored error (`cache.maxErrorTTL`).
    private static func capped(_ lifetime: Int64, status: UInt, rules: StorageRules) -> Int64 {
        guard status >= 400, let maximum = rules.maxErrorLifetime else { return lifetime }
        return min(lifetime, maximum)
    }

    /// The heuristic lifetime of a response without explicit expiry (RFC 9111 section 4.2.2): a fraction of the
    /// time since it was last modified, capped; nil when heuristics are off, the status is not heuristically
    /// cacheable and the response is not `public`, or `Last-Modified` is missing or not before `Date`.
    static func heuristicLifetime(
        status: UInt,
        cacheControl: CacheControl,
        fields: HTTPFieldLines,
        rules: StorageRules,
        now: Int64
    ) -> Int64? {
        guard rules.heuristicMaximum > 0, rules.heuristicFraction > 0,
            heuristicallyCacheableStatuses.contains(status) || cacheControl.isPublic,
            let lastModified = fields.date("last-modified")
        else { return nil }
        let date = fields.date("date") ?? now
        guard lastModified < date else { return nil }
        let lifetime = Double(date - lastModified) * rules.heuristicFraction
        return min(Int64(lifetime.rounded(.down)), rules.heuristicMaximum)
    }

    /// The freshness lifetime the response states (RFC 9111 section 4.2.1): `s-maxage`, else `max-age`, else
    /// `Expires` minus `Date`. An `Expires` that is invalid or appears twice means "already expired".
    public static func explicitLifetime(cacheControl: CacheControl, fields: HTTPFieldLines) -> Int64? {
        if let shared = cacheControl.sharedMaxAge { return shared }
        if let maxAge = cacheControl.maxAge { return maxAge }
        // A targeted field decides alone (RFC 9213 section 2.1).
        if cacheControl.isTargeted { return nil }
        // Dates contain commas, so the raw field lines are read, not the comma-split list.
        var expiresLines = 0
        var expires: Int64?
        fields.forEachValue(of: "expires") { value in
            expiresLines += 1
            expires = HTTPDate.parse(bytes: value)
        }
        guard expiresLines > 0 else { return nil }
        guard expiresLines == 1, let expires else { return 0 }
        // Capped like a delta-seconds value: an Expires in the year 9999 would otherwise wrap the lifetime's
        // nanoseconds negative, and the entry would never be fresh.
        return min(max(0, expires - (fields.date("date") ?? HTTPDate.now())), CacheControl.maximumDeltaSeconds)
    }

    /// Whether a `Vary` member is `*`: the response varies on things outside the request.
    static func variesOnEverything(_ fields: HTTPFieldLines) -> Bool {
        var found = false
        fields.forEachListMember(of: "vary") { member in
            if member.count == 1, member[0] == UInt8(ascii: "*") { found = true }
        }
        return found
    }

    /// An `Age` field line's value (RFC 9111 section 5.1): its first list member when a sender joined several,
    /// digits only (a sign, a fraction or anything else and the field is ignored, nil), capped like any
    /// delta-seconds.
    static func ageSeconds(_ line: String) -> Int64? {
        let member = line.utf8.prefix { $0 != UInt8(ascii: ",") }
        var digits = Substring(member)[...]
        while let first = digits.first, first == " " || first == "\t" { digits.removeFirst() }
        while let last = digits.last, last == " " || last == "\t" { digits.removeLast() }
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        // Past what fits, the largest delta-seconds (RFC 9111 section 1.2.2).
        return Int64(digits).map { min($0, CacheControl.maximumDeltaSeconds) } ?? CacheControl.maximumDeltaSeconds
    }

    /// The corrected initial age of a response (RFC 9111 section 4.2.3), in seconds: the larger of the age
    /// implied by its `Date` and the `Age` it carries plus the time the exchange took.
    public static func initialAge(fields: HTTPFieldLines, requestTime: Int64, responseTime: Int64) -> Int64 {
        let ageValue = fields.first("age").flatMap(ageSeconds) ?? 0
        let dateValue = fields.date("date") ?? responseTime
        let apparentAge = max(0, responseTime - dateValue)
        let responseDelay = max(0, responseTime - requestTime)
        return max(apparentAge, min(ageValue, CacheControl.maximumDeltaSeconds) + responseDelay)
    }
}
