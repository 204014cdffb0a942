import NIOHTTP1

/// Whether a forwarded `POST`'s answer may also answer later `GET`s and `HEAD`s of its target (RFC 9110 section
/// 9.3.3): it must be a representation of that resource (a `200` or `203` whose `Content-Location`, made
/// absolute, is the request's own target URI, RFC 9110 section 8.7) with explicit freshness (RFC 9111 section
/// 4.2.1: `s-maxage`, `max-age` or `Expires`; a heuristic lifetime is not enough for an answer the cache was not
/// asked to keep).
///
/// What this decides is only whether the answer is a candidate: it is then stored as a fill of the `GET` would be,
/// under the same rules (`no-store`, `private`, `Vary: *`, `Authorization`, size, component validation). An
/// answer that sets a cookie is not kept at all: the cookie was for the client that posted.
public enum PostAnswerReuse {
    public enum Decision: Equatable, Sendable {
        /// Keep a copy, and store it under the target's `GET` key once it has ended whole.
        case keep
        /// Pass it on untouched and keep nothing; the reason is for logs and tests.
        case skip(String)
    }

    /// Decides for the answer (`status`, `fields`) to a `POST` of `target` (origin form: path and query) sent with
    /// `Host` `requestHost`.
    public static func decide(
        target: String,
        requestHost: String?,
        status: HTTPResponseStatus,
        fields: HTTPFieldLines
    ) -> Decision {
        guard status == .ok || status == .nonAuthoritativeInformation else {
            return .skip("status \(status.code) is not a representation of the target")
        }
        guard let location = fields.first("content-location") else { return .skip("no Content-Location") }
        guard names(target: target, requestHost: requestHost, contentLocation: location) else {
            return .skip("Content-Location names another resource")
        }
        guard FreshnessPolicy.explicitLifetime(cacheControl: CacheControl(fields: fields), fields: fields) != nil
        else { return .skip("no explicit freshness") }
        guard !fields.contains("set-cookie") else { return .skip("it sets a cookie") }
        return .keep
    }

    /// Whether `contentLocation` is `target`'s URI: the same path and query, given as an absolute path or as an
    /// `http`/`https` URI of the request's own host. Compared as written (RFC 3986 section 6.2.1): no reference that
    /// needs resolving against another path (`a/b`, `../b`) is taken for the target, which is the safe side.
    static func names(target: String, requestHost: String?, contentLocation: String) -> Bool {
        if contentLocation.hasPrefix("/") { return !contentLocation.hasPrefix("//") && contentLocation == target }
        guard let url = AbsoluteURL(parsing: contentLocation), let requestHost else { return false }
        let pathAndQuery = url.query.map { url.path + "?" + $0 } ?? url.path
        guard pathAndQuery == target else { return false }
        let defaultPort = url.scheme == "https" ? 443 : 80
        let host = url.host.contains(":") ? "[\(url.host)]" : url.host
        let authority = url.port == defaultPort ? host : "\(host):\(url.port)"
        return authority.lowercased() == requestHost.lowercased()
            || "\(host):\(url.port)".lowercased() == requestHost.lowercased()
    }
}
