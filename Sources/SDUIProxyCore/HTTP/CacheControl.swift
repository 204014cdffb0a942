import NIOHTTP1

/// The `Cache-Control` directives of a message (RFC 9111 section 5.2), parsed from every `Cache-Control`
/// field line.
///
/// Directive names are matched without regard to case. When a directive with an argument appears more than
/// once, the first occurrence counts (RFC 9111 section 4.2.1); an argument that is not a valid delta-seconds
/// value makes the directive count as `0` (stale, the conservative reading). Qualified `private="..."` and
/// `no-cache="..."` are read as their unqualified forms, which RFC 9111 allows and which never serves more
/// than the origin intended.
public struct CacheControl: Equatable, Sendable {
    public var noStore = false
    public var noCache = false
    public var isPrivate = false
    public var isPublic = false
    public var mustRevalidate = false
    public var proxyRevalidate = false
    public var noTransform = false
    public var onlyIfCached = false
    public var maxAge: Int64?
    public var sharedMaxAge: Int64?
    public var staleWhileRevalidate: Int64?
    public var staleIfError: Int64?
    public var maxStale: Int64?
    public var minFresh: Int64?

    /// Whether any directive gives an explicit freshness lifetime.
    public var hasExplicitLifetime: Bool { maxAge != nil || sharedMaxAge != nil }

    public init() {}

    public init(headers: HTTPHeaders) {
        for line in headers[canonicalForm: "cache-control"] {
            parse(line)
        }
    }

    /// The largest delta-seconds value RFC 9111 section 1.2.2 asks caches to work with.
    public static let maximumDeltaSeconds: Int64 = 2_147_483_648

    private mutating func parse<S: StringProtocol>(_ line: S) {
        for rawDirective in Self.splitDirectives(line) {
            let directive = rawDirective.trimmingWhitespace()
            guard !directive.isEmpty else { continue }
            let name: String
            let argument: String?
            if let equals = directive.firstIndex(of: "=") {
                name = directive[..<equals].trimmingWhitespace().lowercased()
                var value = directive[directive.index(after: equals)...].trimmingWhitespace()
                if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                    value = String(value.dropFirst().dropLast())
                }
                argument = value
            } else {
                name = directive.lowercased()
                argument = nil
            }
            switch name {
            case "no-store": noStore = true
            case "no-cache": noCache = true
            case "private": isPrivate = true
            case "public": isPublic = true
            case "must-revalidate": mustRevalidate = true
            case "proxy-revalidate": proxyRevalidate = true
            case "no-transform": noTransform = true
            case "only-if-cached": onlyIfCached = true
            case "max-age": if maxAge == nil { maxAge = Self.deltaSeconds(argument) }
            case "s-maxage": if sharedMaxAge == nil { sharedMaxAge = Self.deltaSeconds(argument) }
            case "stale-while-revalidate":
                if staleWhileRevalidate == nil { staleWhileRevalidate = Self.deltaSeconds(argument) }
            case "stale-if-error": if staleIfError == nil { staleIfError = Self.deltaSeconds(argument) }
            case "max-stale":
                if maxStale == nil {
                    maxStale = argument == nil ? Self.maximumDeltaSeconds : Self.deltaSeconds(argument)
                }
            case "min-fresh": if minFresh == nil { minFresh = Self.deltaSeconds(argument) }
            default: break
            }
        }
    }

    /// Splits on commas outside quoted strings.
    private static func splitDirectives<S: StringProtocol>(_ line: S) -> [Substring] {
        var parts: [Substring] = []
        let text = Substring(line)
        var start = text.startIndex
        var inQuotes = false
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if character == "\"" {
                inQuotes.toggle()
            } else if character == ",", !inQuotes {
                parts.append(text[start..<index])
                start = text.index(after: index)
            }
            index = text.index(after: index)
        }
        parts.append(text[start...])
        return parts
    }

    private static func deltaSeconds(_ argument: String?) -> Int64 {
        guard let argument, !argument.isEmpty, argument.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            return 0
        }
        guard argument.count <= 10, let value = Int64(argument) else { return maximumDeltaSeconds }
        return min(value, maximumDeltaSeconds)
    }
}
