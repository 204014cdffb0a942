import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// `GET /cache/entries` and `GET /cache/entry`: what is cached, as an operator reads it.
///
/// - `GET /cache/entries?prefix=/screens/&platform=ios&limit=100` (the platform in any case) lists stored responses under a path prefix (whole
///   segments, as a purge's `prefix=`), on one platform when given: key, platform, variant, size per encoding, age,
///   time to live and tags, at most `limit` (100 by default, 1,000 at most), with `"more":true` when some were left
///   out.
/// - `GET /cache/entry?platform=ios&url=/screens/home?tab=1` shows every stored variant of one target on one
///   platform with its stored head (`Set-Cookie` values redacted). `url=` takes the rest of the query, as in
///   `DELETE /cache`, so `platform=` comes first.
///
/// Never a body. Hits per entry are not shown: the hit path writes nothing per entry, and counting would add a
/// write to every hit.
enum CacheEntriesView {
    static let defaultLimit = 100
    static let maximumLimit = 1000

    /// The body of `GET /cache/entries?<rawQuery>`.
    static func list(rawQuery: String?, cache: ResponseCache, now: NIODeadline) throws(ProxyError) -> String {
        guard let parameters = AdminHTTPHandler.queryParameters(Substring(rawQuery ?? "")) else {
            throw ProxyError(.badRequest, "the query is not well formed")
        }
        for name in parameters.keys where !["prefix", "platform", "limit"].contains(name) {
            throw ProxyError(.badRequest, "unknown parameter \(name): use prefix=, platform= and limit=")
        }
        var limit = defaultLimit
        if let text = parameters["limit"] {
            guard let value = Int(text), (1...maximumLimit).contains(value) else {
                throw ProxyError(.badRequest, "limit must be a number from 1 to \(maximumLimit)")
            }
            limit = value
        }
        // Spelled as a purge's `prefix=`.
        let prefix = try parameters["prefix"].map { given throws(ProxyError) in try PurgeRequest.prefix(given) }
        // Platforms are kept upper-cased, as requests name them after routing.
        let platform = parameters["platform"]?.uppercased()
        let matcher = prefix.map(PathPrefix.init)
        let (found, more) = cache.storedResponses(limit: limit) { key in
            (platform == nil || key.platform == platform![...]) && (matcher?.matches(key.target) ?? true)
        }
        let entries = found.map { json(key: $0.key, response: $0.response, now: now, head: false) }
        let scope = prefix.map { #""prefix":\#(JSONText.quoted($0)),"# } ?? ""
        return #"{\#(scope)"count":\#(entries.count),"more":\#(more),"entries":[\#(entries.joined(separator: ","))]}"#
    }

    /// The body of `GET /cache/entry?platform=P&url=TARGET`, or a 404 when nothing is stored for it.
    static func entry(rawQuery: String?, cache: ResponseCache, now: NIODeadline) throws(ProxyError) -> AdminResponse {
        var query = Substring(rawQuery ?? "")
        var platform: String?
        if query.hasPrefix("platform="), let separator = query.firstIndex(of: "&") {
            platform = AdminHTTPHandler.percentDecoded(query[query.index(query.startIndex, offsetBy: 9)..<separator])?
                .uppercased()
            query = query[query.index(after: separator)...]
        }
        guard let platform, !platform.isEmpty, query.hasPrefix("url=") else {
            throw ProxyError(.badRequest, "use platform=P&url=/path (url= last: it takes the rest of the query)")
        }
        let value = query.dropFirst(4)
        let url = value.hasPrefix("/") ? String(value) : AdminHTTPHandler.percentDecoded(value, plusIsSpace: false)
        guard let url, let target = try? RequestTarget(parsing: url) else {
            throw ProxyError(.badRequest, "url must be a path starting with /")
        }
        let normalised = target.description
        let (found, _) = cache.storedResponses(limit: maximumLimit) { key in
            key.target == normalised && key.platform == platform[...]
        }
        guard !found.isEmpty else {
            return AdminResponse(ProxyError(.notFound, "nothing is stored for \(normalised) on \(platform)"))
        }
        let variants = found.map { json(key: $0.key, response: $0.response, now: now, head: true) }
        return AdminResponse(
            json: #"{"url":\#(JSONText.quoted(normalised)),"platform":\#(JSONText.quoted(platform)),"#
                + #""variants":[\#(variants.joined(separator: ","))]}"#
        )
    }

    /// One stored response: its key's parts, sizes, age and lifetime, tags, and with `head` its status and fields.
    static func json(key: CacheKey, response: CachedResponse, now: NIODeadline, head: Bool) -> String {
        // The variant is the platform, each configured vary header's value after a 0 byte, then the values of the
        // backend's `Vary` after a 1 byte.
        let parts = key.variant.split(separator: "\u{1}", maxSplits: 1, omittingEmptySubsequences: false)
        let varyValues = parts[0].split(separator: "\u{0}", omittingEmptySubsequences: false).dropFirst()
        var sizes = [#""identity":\#(response.bodyLength)"#]
        for form in response.encodedForms {
            if let coding = form.coding { sizes.append(#""\#(coding.rawValue)":\#(form.bodyLength)"#) }
        }
        var fields = [
            #""url":\#(JSONText.quoted(key.target))"#,
            #""platform":\#(JSONText.quoted(String(key.platform)))"#,
            #""varyValues":[\#(varyValues.map { JSONText.quoted(String($0)) }.joined(separator: ","))]"#,
            #""backendVary":\#(quotedList(response.varyNames))"#,
            #""backendVariant":\#(parts.count > 1 ? JSONText.quoted(String(parts[1])) : "null")"#,
            #""status":\#(response.status.code)"#,
            #""bytes":{\#(sizes.joined(separator: ","))}"#,
            #""ageSeconds":\#(response.ageSeconds(at: now))"#,
            #""ttlSeconds":\#(response.remainingLifetime(at: now))"#,
            #""tags":\#(quotedList(response.tags))"#,
        ]
        if head {
            let lines = response.headers.map { name, value in
                let shown = name.lowercased() == "set-cookie" ? redactedCookie(value) : value
                return "[\(JSONText.quoted(name)),\(JSONText.quoted(shown))]"
            }
            fields.append(#""headers":[\#(lines.joined(separator: ","))]"#)
        }
        return "{" + fields.joined(separator: ",") + "}"
    }

    /// A `Set-Cookie` with its value hidden: the name and attributes tell an operator what it is; the value is a
    /// client's secret.
    static func redactedCookie(_ value: String) -> String {
        let pair = value.prefix { $0 != ";" }
        let attributes = value.dropFirst(pair.count)
        let name = pair.prefix { $0 != "=" }
        return name + "=<redacted>" + attributes
    }

    private static func quotedList(_ values: [String]) -> String {
        "[" + values.map(JSONText.quoted).joined(separator: ",") + "]"
    }
}
