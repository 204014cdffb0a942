import NIOHTTP1

/// Whether a response may be stored by a shared cache, and for how long it stays fresh (RFC 9111 sections 3
/// and 4.2), with the route's configured default lifetime as the opt-in fallback for backends that send no
/// freshness information.
public enum FreshnessPolicy {
    /// Statuses a cache may store when the response carries explicit freshness (RFC 9110 section 15.1
    /// "heuristically cacheable" statuses, plus 200).
    public static let cacheableStatuses: Set<UInt> = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501]

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
    ///   - status: the response status.
    ///   - responseFields: the response's header fields.
    ///   - defaultTTL: lifetime in seconds for responses without explicit freshness; 0 leaves them unstored.
    ///   - cacheControl: the response's `Cache-Control`, when the caller has parsed it already.
    public static func decide(
        requestHeaders: HTTPHeaders,
        status: HTTPResponseStatus,
        responseFields: HTTPFieldLines,
        defaultTTL: Int64,
        cacheControl: CacheControl? = nil
    ) -> Decision {
        let cacheControl = cacheControl ?? CacheControl(fields: responseFields)
        if cacheControl.noStore { return .doNotStore(reason: "no-store") }
        if cacheControl.isPrivate { return .doNotStore(reason: "private") }
        if CacheControl(headers: requestHeaders).noStore { return .doNotStore(reason: "request no-store") }
        if !CacheFillPolicy.authorizationPermitsSharing(
            requestHasAuthorization: requestHeaders.contains(name: "authorization"),
            directives: cacheControl
        ) {
            return .doNotStore(reason: "authorization")
        }
        if responseFields.contains("set-cookie") { return .doNotStore(reason: "set-cookie") }
        if variesOnEverything(responseFields) { return .doNotStore(reason: "vary *") }
        guard cacheableStatuses.contains(status.code) else { return .doNotStore(reason: "status \(status.code)") }
        // A response that must be validated before every use is only worth keeping when it can be validated.
        let hasValidator = responseFields.contains("etag") || responseFields.contains("last-modified")
        if cacheControl.noCache {
            return hasValidator ? .store(lifetime: 0) : .doNotStore(reason: "no-cache without a validator")
        }
        if let lifetime = explicitLifetime(cacheControl: cacheControl, fields: responseFields) {
            if lifetime > 0 || hasValidator { return .store(lifetime: lifetime) }
            return .doNotStore(reason: "already stale")
        }
        // No heuristic freshness: RFC 9111 section 4.2.2 allows it but never requires it, and a screen cached
        // longer than its backend intended is worse than one fetched again.
        if defaultTTL > 0, status == .ok { return .store(lifetime: defaultTTL) }
        return .doNotStore(reason: "no freshness information")
    }

    /// The freshness lifetime the response states (RFC 9111 section 4.2.1): `s-maxage`, else `max-age`, else
    /// `Expires` minus `Date`. An `Expires` that is invalid or appears twice means "already expired".
    public static func explicitLifetime(cacheControl: CacheControl, fields: HTTPFieldLines) -> Int64? {
        if let shared = cacheControl.sharedMaxAge { return shared }
        if let maxAge = cacheControl.maxAge { return maxAge }
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
