import NIOHTTP1

/// Evaluates a client's conditional GET against a stored response (RFC 9110 section 13.2.2).
public enum ConditionalRequest {
    /// Whether the client already has the stored representation, so a 304 answers it.
    ///
    /// `If-None-Match` uses weak comparison and, when present, decides alone; otherwise `If-Modified-Since`
    /// is compared with the entry's `Last-Modified`, or, for an entry without one, with `storedDate`: its `Date`,
    /// or the time it was stored (RFC 9111 section 4.3.2, RFC 9110 section 13.1.3), in seconds since the epoch.
    public static func isNotModified(
        requestHeaders: HTTPHeaders,
        etag: String,
        lastModified: String?,
        storedDate: () -> Int64? = { nil }
    ) -> Bool {
        let ifNoneMatch = requestHeaders[canonicalForm: "if-none-match"]
        if !ifNoneMatch.isEmpty {
            let stored = opaqueTag(etag)
            return ifNoneMatch.contains { candidate in
                let tag = candidate.trimmingWhitespace()
                return tag == "*" || opaqueTag(tag) == stored
            }
        }
        guard let since = requestHeaders.first(name: "if-modified-since").flatMap({ HTTPDate.parse($0) }) else {
            return false
        }
        if let lastModified { return HTTPDate.parse(lastModified).map { $0 <= since } ?? false }
        return storedDate().map { $0 <= since } ?? false
    }

    /// The opaque part of an entity tag, without the weak marker (`W/"x"` and `"x"` compare equal weakly).
    static func opaqueTag(_ tag: some StringProtocol) -> Substring {
        let trimmed = Substring(tag)
        return trimmed.hasPrefix("W/") ? trimmed.dropFirst(2) : trimmed
    }

    /// The headers a 304 repeats from the stored response (RFC 9110 section 15.4.5).
    public static let notModifiedHeaderNames: [StaticString] = [
        "cache-control", "content-location", "date", "etag", "expires", "vary", "last-modified",
    ]
}
