import RawStructuredFieldValues

/// Targeted cache-control fields (RFC 9213), such as `CDN-Cache-Control`: directives meant for one class of
/// cache, which then decide alone for it.
///
/// Unlike `Cache-Control`, a targeted field is a Structured Field Dictionary (RFC 9651): keys are lower case,
/// `max-age` is an integer, `no-store` a boolean. A field that does not parse, or gives a directive this cache
/// knows a value of the wrong type, is ignored whole (RFC 9213 section 2.1): a half-read field could store
/// what its sender meant to keep out.
public enum TargetedCacheControl {
    /// The directives of the first field of `fieldNames` (lower case, in order of preference) that `fields`
    /// carries and that is valid; nil when none is.
    public static func directives(in fields: HTTPFieldLines, fieldNames: [String]) -> CacheControl? {
        directives(in: fields, byteNames: fieldNames.map { Array($0.utf8) })
    }

    /// ``directives(in:fieldNames:)`` for names already in bytes (lower case).
    static func directives(in fields: HTTPFieldLines, byteNames: [[UInt8]]) -> CacheControl? {
        for name in byteNames {
            guard let value = combinedValue(of: name, in: fields) else { continue }
            if let directives = parse(value) { return directives }
        }
        return nil
    }

    /// The field's lines joined with ", ", as RFC 9651 section 4.2 parses a field sent on several lines; nil
    /// when there is none.
    private static func combinedValue(of name: [UInt8], in fields: HTTPFieldLines) -> [UInt8]? {
        var combined: [UInt8]?
        fields.forEachField { fieldName, value in
            guard HTTPSyntax.equalsIgnoringCase(fieldName, lowercased: name) else { return }
            if combined == nil {
                combined = Array(value)
            } else {
                combined!.append(contentsOf: ", ".utf8)
                combined!.append(contentsOf: value)
            }
        }
        return combined
    }

    /// One field value's directives, or nil when the value is not a valid dictionary of directives.
    static func parse(_ value: [UInt8]) -> CacheControl? {
        var parser = StructuredFieldValueParser(value)
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return nil }
        var directives = CacheControl()
        directives.isTargeted = true
        for (key, member) in dictionary {
            guard let kind = Directive(rawValue: key) else { continue }  // Other caches' directives.
            guard case .item(let item) = member else { return nil }
            switch (kind, item.rfc9651BareItem) {
            case (.maxAge, .integer(let seconds)) where seconds >= 0: directives.maxAge = deltaSeconds(seconds)
            case (.sharedMaxAge, .integer(let seconds)) where seconds >= 0:
                directives.sharedMaxAge = deltaSeconds(seconds)
            case (.staleWhileRevalidate, .integer(let seconds)) where seconds >= 0:
                directives.staleWhileRevalidate = deltaSeconds(seconds)
            case (.staleIfError, .integer(let seconds)) where seconds >= 0:
                directives.staleIfError = deltaSeconds(seconds)
            case (.noStore, .bool(let set)): directives.noStore = set
            case (.mustRevalidate, .bool(let set)): directives.mustRevalidate = set
            case (.proxyRevalidate, .bool(let set)): directives.proxyRevalidate = set
            case (.public, .bool(let set)): directives.isPublic = set
            case (.mustUnderstand, .bool(let set)): directives.mustUnderstand = set
            case (.noTransform, .bool(let set)): directives.noTransform = set
            // A list of field names is read as the unqualified directive, as for `Cache-Control`.
            case (.private, .bool(let set)): directives.isPrivate = set
            case (.private, .string): directives.isPrivate = true
            case (.noCache, .bool(let set)): directives.noCache = set
            case (.noCache, .string): directives.noCache = true
            default: return nil
            }
        }
        return directives
    }

    private static func deltaSeconds(_ value: Int64) -> Int64 { min(value, CacheControl.maximumDeltaSeconds) }

    /// The directives this cache reads from a targeted field, by their keys.
    private enum Directive: String {
        case maxAge = "max-age"
        case sharedMaxAge = "s-maxage"
        case staleWhileRevalidate = "stale-while-revalidate"
        case staleIfError = "stale-if-error"
        case noStore = "no-store"
        case mustRevalidate = "must-revalidate"
        case proxyRevalidate = "proxy-revalidate"
        case `public`
        case mustUnderstand = "must-understand"
        case noTransform = "no-transform"
        case `private`
        case noCache = "no-cache"
    }
}
