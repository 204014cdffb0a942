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
    public var mustUnderstand = false
    public var maxAge: Int64?
    public var sharedMaxAge: Int64?
    public var staleWhileRevalidate: Int64?
    public var staleIfError: Int64?
    public var maxStale: Int64?
    public var minFresh: Int64?

    /// Whether these directives came from a targeted field (RFC 9213) rather than `Cache-Control`: they then
    /// decide alone, and `Expires` is not read.
    public var isTargeted = false

    /// Whether any directive gives an explicit freshness lifetime.
    public var hasExplicitLifetime: Bool { maxAge != nil || sharedMaxAge != nil }

    public init() {}

    public init(headers: HTTPHeaders) {
        // The field values as they are: NIO's `canonicalForm` splits at every comma, quoted or not. (Looked up
        // by name, which copies only the matching values; iterating would copy every name and value.)
        for value in headers["cache-control"] {
            value.withContiguousUTF8 { parse($0) }
        }
    }

    /// The directives of a backend response's fields, read where they lie.
    public init(fields: HTTPFieldLines) {
        fields.forEachValue(of: "cache-control") { read($0) }
    }

    /// Adds the directives of one `Cache-Control` field value, read where it lies.
    mutating func read(_ value: UnsafeRawBufferPointer) {
        parse(value.assumingMemoryBound(to: UInt8.self))
    }

    /// The largest delta-seconds value RFC 9111 section 1.2.2 asks caches to work with.
    public static let maximumDeltaSeconds: Int64 = 2_147_483_648

    /// Reads one field line's directives, splitting at commas outside quoted strings, in place.
    private mutating func parse(_ line: UnsafeBufferPointer<UInt8>) {
        var start = 0
        var inQuotes = false
        for index in line.indices {
            switch line[index] {
            case UInt8(ascii: "\""): inQuotes.toggle()
            case UInt8(ascii: ","):
                if !inQuotes {
                    apply(HTTPSyntax.trimmingOptionalWhitespace(line[start..<index]))
                    start = index + 1
                }
            default: break
            }
        }
        apply(HTTPSyntax.trimmingOptionalWhitespace(line[start...]))
    }

    private mutating func apply(_ directive: Slice<UnsafeBufferPointer<UInt8>>) {
        guard !directive.isEmpty else { return }
        let name: Slice<UnsafeBufferPointer<UInt8>>
        var argument: Slice<UnsafeBufferPointer<UInt8>>?
        if let equals = directive.firstIndex(of: UInt8(ascii: "=")) {
            name = HTTPSyntax.trimmingOptionalWhitespace(directive[..<equals])
            var value = HTTPSyntax.trimmingOptionalWhitespace(directive[(equals + 1)...])
            if value.count >= 2, value.first == UInt8(ascii: "\""), value.last == UInt8(ascii: "\"") {
                value = value.dropFirst().dropLast()
            }
            argument = value
        } else {
            name = directive
            argument = nil
        }
        if Self.is(name, "no-store") {
            noStore = true
        } else if Self.is(name, "no-cache") {
            noCache = true
        } else if Self.is(name, "private") {
            isPrivate = true
        } else if Self.is(name, "public") {
            isPublic = true
        } else if Self.is(name, "must-revalidate") {
            mustRevalidate = true
        } else if Self.is(name, "proxy-revalidate") {
            proxyRevalidate = true
        } else if Self.is(name, "no-transform") {
            noTransform = true
        } else if Self.is(name, "only-if-cached") {
            onlyIfCached = true
        } else if Self.is(name, "must-understand") {
            mustUnderstand = true
        } else if Self.is(name, "max-age") {
            if maxAge == nil { maxAge = Self.deltaSeconds(argument) }
        } else if Self.is(name, "s-maxage") {
            if sharedMaxAge == nil { sharedMaxAge = Self.deltaSeconds(argument) }
        } else if Self.is(name, "stale-while-revalidate") {
            if staleWhileRevalidate == nil { staleWhileRevalidate = Self.deltaSeconds(argument) }
        } else if Self.is(name, "stale-if-error") {
            if staleIfError == nil { staleIfError = Self.deltaSeconds(argument) }
        } else if Self.is(name, "max-stale") {
            if maxStale == nil { maxStale = argument == nil ? Self.maximumDeltaSeconds : Self.deltaSeconds(argument) }
        } else if Self.is(name, "min-fresh") {
            if minFresh == nil { minFresh = Self.deltaSeconds(argument) }
        }
    }

    /// Whether a directive's name is `lowercased`, ignoring ASCII case.
    private static func `is`(_ name: Slice<UnsafeBufferPointer<UInt8>>, _ lowercased: StaticString) -> Bool {
        HTTPSyntax.equalsIgnoringCase(bytes: name, lowercased)
    }

    private static func deltaSeconds(_ argument: Slice<UnsafeBufferPointer<UInt8>>?) -> Int64 {
        guard let argument, !argument.isEmpty, argument.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            return 0
        }
        guard argument.count <= 10 else { return maximumDeltaSeconds }
        let value = argument.reduce(Int64(0)) { $0 * 10 + Int64($1 - 0x30) }
        return min(value, maximumDeltaSeconds)
    }
}
