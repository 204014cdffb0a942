import SDUIProxyCore

/// `DELETE /cache`: the invalidation its query asks for, and the answer once it is applied.
///
/// The forms are `?url=PATH`, `?prefix=PATH`, `?tag=TAG`, or no parameter for everything, each with an optional
/// `soft=true` (or `soft=false`, the default) that marks the responses stale instead of removing them.
///
/// `url=` takes the rest of the query string, so a target with a query of its own needs no encoding:
/// `url=/search?q=a&page=2` purges `/search?q=a&page=2`. Written as it is (starting with `/`), it is normalised
/// as request targets are, so `%20` or `%2F` in it mean what they mean in a request; encoded whole
/// (`%2Fsearch%3Fq%3D...`), it is decoded once first (`+` stays `+`). With `url=`, `soft=` may come first
/// (`soft=true&url=/a`) or last: a trailing `&soft=` parameter is always the flag, never part of the target, so
/// a target whose own query ends in a `soft` parameter must be encoded whole.
enum PurgeRequest {
    /// The invalidation `DELETE /cache?<rawQuery>` asks for (`rawQuery` is the query as it came, after the `?`;
    /// nil without one), or the 400 it gets.
    static func invalidation(rawQuery: String?) throws(ProxyError) -> CacheInvalidation {
        var query = Substring(rawQuery ?? "")
        var soft: Bool?
        // `soft=` before `url=`, which takes the rest.
        if query.hasPrefix("soft="), let separator = query.firstIndex(of: "&"),
            query[query.index(after: separator)...].hasPrefix("url=")
        {
            soft = try flag(query[query.index(query.startIndex, offsetBy: 5)..<separator])
            query = query[query.index(after: separator)...]
        }
        if query.hasPrefix("url=") {
            var value = query.dropFirst(4)
            if let separator = value.lastIndex(of: "&"), value[value.index(after: separator)...].hasPrefix("soft=") {
                guard soft == nil else { throw ProxyError(.badRequest, "soft= is given twice") }
                soft = try flag(value[value.index(separator, offsetBy: 6)...], endingURL: true)
                value = value[..<separator]
            }
            let url = value.hasPrefix("/") ? String(value) : AdminHTTPHandler.percentDecoded(value, plusIsSpace: false)
            guard let url, let target = try? RequestTarget(parsing: url) else {
                throw ProxyError(.badRequest, "url must be a path starting with /")
            }
            return CacheInvalidation(.targets([target.description]), soft: soft ?? false)
        }

        guard let parameters = AdminHTTPHandler.queryParameters(query) else {
            throw ProxyError(.badRequest, "the query is not well formed")
        }
        let scopes: Set<String> = ["url", "prefix", "tag"]
        guard parameters.keys.filter(scopes.contains).count <= 1,
            parameters.keys.allSatisfy({ scopes.contains($0) || $0 == "soft" })
        else {
            throw ProxyError(
                .badRequest,
                "use one of url=, prefix= or tag=, or none to purge everything, and soft=true to mark stale"
            )
        }
        let isSoft = try parameters["soft"].map { text throws(ProxyError) in try flag(text[...]) } ?? false
        if parameters["url"] != nil {
            throw ProxyError(.badRequest, "url= must come first (after soft= at most): it takes the rest of the query")
        } else if let given = parameters["prefix"] {
            return CacheInvalidation(.prefix(try prefix(given)), soft: isSoft)
        } else if let tag = parameters["tag"] {
            guard !tag.isEmpty else { throw ProxyError(.badRequest, "tag must not be empty") }
            return CacheInvalidation(.tag(tag), soft: isSoft)
        }
        return CacheInvalidation(.all, soft: isSoft)
    }

    /// A `prefix=` value normalised as request targets are, so that it meets the keys' spelling; a trailing `?`
    /// (every query of one path) is kept, where a target would drop it as an empty query.
    static func prefix(_ given: String) throws(ProxyError) -> String {
        guard given.hasPrefix("/"), let target = try? RequestTarget(parsing: given) else {
            throw ProxyError(.badRequest, "prefix must be a path starting with /")
        }
        return given.hasSuffix("?") && target.query == nil ? target.description + "?" : target.description
    }

    /// The value of `soft=`.
    private static func flag(_ text: Substring, endingURL: Bool = false) throws(ProxyError) -> Bool {
        switch text {
        case "true": return true
        case "false": return false
        default:
            throw ProxyError(
                .badRequest,
                endingURL
                    ? "soft must be true or false (a target whose own query ends in a soft parameter is encoded whole)"
                    : "soft must be true or false"
            )
        }
    }

    /// The answer to a purge with what it reached: `{"purged":N,"inFlight":M,"url":...}` (or `"prefix"`, `"tag"`,
    /// `"all":true`), where `purged` counts stored responses and `inFlight` the fills in flight it reached (for a
    /// tag, every fill in flight: those whose answers carry it are not stored), with `"soft":true` when it was
    /// soft, and in a fleet `"fanOut":"recorded"` (the other replicas apply it now) or `"pending"` (when PostgreSQL
    /// is reachable again).
    static func answer(
        _ invalidation: CacheInvalidation,
        reached: ResponseCache.Reach,
        fanOut: FleetLog.FanOut? = nil
    ) -> String {
        let scope =
            switch invalidation.scope {
            case .targets(let targets) where targets.count == 1: #""url":\#(JSONText.quoted(targets[0]))"#
            case .targets(let targets): #""urls":[\#(targets.map { JSONText.quoted($0) }.joined(separator: ","))]"#
            case .prefix(let prefix): #""prefix":\#(JSONText.quoted(prefix))"#
            case .tag(let tag): #""tag":\#(JSONText.quoted(tag))"#
            case .all: #""all":true"#
            }
        let soft = invalidation.soft ? #","soft":true"# : ""
        let fleet = fanOut.map { #","fanOut":"\#($0.rawValue)""# } ?? ""
        return #"{"purged":\#(reached.responses),"inFlight":\#(reached.fillsInFlight),\#(scope)\#(soft)\#(fleet)}"#
    }
}
