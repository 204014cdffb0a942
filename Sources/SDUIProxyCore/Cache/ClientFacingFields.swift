import NIOHTTP1

/// What the cache changes in a backend's header fields before clients see them.
///
/// - `Vary` names every request field the cache key includes (the platform header and the route's `vary`
///   headers), merged with the backend's own `Vary`: a CDN or browser cache in front of the proxy must not hand
///   one platform's answer to another. The platform header is named even when the client sent none and the
///   configured default keyed the entry: a client that sends one would select another entry.
/// - The purge tag field (`cache.tagHeader`) is the operator's vocabulary, left out unless `cache.exposeTags`
///   keeps it; the tags themselves are still recorded for purging.
///
/// A stored entry has these applied once, in its stored head, so a hit pays nothing for them; answers passed on
/// unstored have them applied as they go out.
public struct ClientFacingFields: Sendable, Equatable {
    /// The request fields the cache key includes, as configured, which `Vary` names. Empty for answers the cache
    /// keys on nothing (bypass routes).
    public let keyFields: [String]
    /// The field left out of what clients see, lower-cased; nil when clients see it.
    public let hiddenField: String?
    /// Its length in bytes (-1 without one): most names differ in it, which settles them without the string.
    private let hiddenFieldCount: Int
    /// Its first eight bytes, lower-cased, as one word (loaded as names are, in the machine's order); nil without
    /// one or for a shorter one. Names as long as `Surrogate-Key` are common (`Last-Modified`, `Accept-Ranges`,
    /// `Cache-Control`), and a comparison with the string cost each about 115 instructions; one with this word turns
    /// nearly all of them away.
    public let hiddenFieldLead: UInt64?
    /// `Vary` when the backend names none (nearly always): merged once, not for every entry stored; then the
    /// same for a response kept compressed, which names `Accept-Encoding` too.
    private let keyFieldsVary: String?
    private let keyFieldsVaryNamingEncoding: String?

    /// Fields with `keyFields` to name in `Vary`, and `hiddenField` to leave out.
    public init(keyFields: [String] = [], hiddenField: String? = nil) {
        self.keyFields = keyFields
        self.hiddenField = hiddenField?.lowercased()
        self.hiddenFieldCount = self.hiddenField?.utf8.count ?? -1
        self.hiddenFieldLead = self.hiddenField.flatMap(Self.lead(of:))
        self.keyFieldsVary = Self.merged([], keyFields)
        // Without key fields it is `Accept-Encoding` alone, made without an array: forwarded answers' fields (no
        // keys) are made for every configuration.
        self.keyFieldsVaryNamingEncoding =
            keyFields.isEmpty ? "Accept-Encoding" : Self.merged([], keyFields + ["Accept-Encoding"])
    }

    /// The fields for answers to requests under `policy` (nil for a request whose answer the cache keys on
    /// nothing), as `configuration` says.
    public init(_ configuration: ProxyConfiguration, policy: ProxyConfiguration.RoutePolicy?) {
        self.init(
            keyFields: policy.map { Self.keyFields(platformHeader: configuration.platform.header, policy: $0) } ?? [],
            hiddenField: configuration.cache.exposeTags ? nil : configuration.cache.tagHeader
        )
    }

    /// The request fields the key of a request under `policy` includes: the platform header, then the route's
    /// `vary` headers (``RequestRouter/cacheKey(target:platform:headers:policy:)``).
    public static func keyFields(platformHeader: String, policy: ProxyConfiguration.RoutePolicy) -> [String] {
        var keyFields = [platformHeader]
        for name in policy.vary where !keyFields.contains(where: { $0.lowercased() == name.lowercased() }) {
            keyFields.append(name)
        }
        return keyFields
    }

    /// The first eight bytes of the field name `name`, lower-cased, as one word loaded in the machine's order, as
    /// ``hides(_:)`` loads a name's; nil for a name shorter than that.
    private static func lead(of name: String) -> UInt64? {
        guard name.utf8.count >= 8 else { return nil }
        return name.withContiguousUTF8 {
            HTTPSyntax.lowercasedASCII(word: UnsafeRawBufferPointer($0).loadUnaligned(as: UInt64.self))
        }
    }

    /// Whether these fields change nothing.
    public var changesNothing: Bool { keyFields.isEmpty && hiddenField == nil }

    /// Whether the field named `name` is left out.
    public func hides(_ name: UnsafeRawBufferPointer) -> Bool {
        // A name of its length whose first eight bytes differ goes by one comparison. In this shape: two others that
        // read the same changed what the compiler inlined into storing a response, and cost a miss 500 instructions.
        guard name.count == hiddenFieldCount, let hiddenField, let hiddenFieldLead else {
            return name.count == hiddenFieldCount
                && hiddenField.map { HTTPSyntax.sameIgnoringCase(bytes: name, $0) } == true
        }
        return HTTPSyntax.lowercasedASCII(word: name.loadUnaligned(as: UInt64.self)) == hiddenFieldLead
            && HTTPSyntax.sameIgnoringCase(bytes: name, hiddenField)
    }

    /// The value of `Vary` that names the backend's `members` (as it sent them, in its order), then each of
    /// ``keyFields`` it did not name, then `Accept-Encoding` when `namingAcceptEncoding` (a response kept
    /// compressed), every name once whatever its case; nil when there is nothing to name, or when the backend's
    /// `Vary` has `*`, which already says that any field may select the answer.
    public func vary(merging members: [String], namingAcceptEncoding: Bool = false) -> String? {
        guard namingAcceptEncoding else { return members.isEmpty ? keyFieldsVary : Self.merged(members, keyFields) }
        return members.isEmpty ? keyFieldsVaryNamingEncoding : Self.merged(members, keyFields + ["Accept-Encoding"])
    }

    private static func merged(_ members: [String], _ keyFields: [String]) -> String? {
        guard !keyFields.isEmpty, !members.contains("*") else { return nil }
        var names: [String] = []
        var seen: Set<String> = []
        for name in members + keyFields where !name.isEmpty && seen.insert(name.lowercased()).inserted {
            names.append(name)
        }
        return names.joined(separator: ", ")
    }

    /// Applies the changes to the headers of an answer passed on as it came: the hidden field removed, `Vary`
    /// merged with ``keyFields``.
    public func apply(to headers: inout HTTPHeaders) {
        if let hiddenField { headers.remove(name: hiddenField) }
        guard !keyFields.isEmpty else { return }
        let members = headers[canonicalForm: "vary"].map(String.init)
        guard let merged = vary(merging: members) else { return }
        headers.replaceOrAdd(name: "Vary", value: merged)
    }
}
