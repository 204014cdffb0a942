/// The cache-wide rules an operator sets for what is stored and for how long, beyond what each response says:
/// which targeted fields this cache obeys, heuristic freshness, a cap on stored errors, and `Set-Cookie`.
public struct StorageRules: Sendable, Equatable {
    /// The targeted cache-control fields (RFC 9213) this cache obeys, lower case, in order of preference.
    public var targetedFields: [String] = ["cdn-cache-control"] {
        didSet { targetedFieldNames = targetedFields.map { Array($0.utf8) } }
    }
    /// ``targetedFields`` as bytes, made once: every miss compares its field names with them.
    private var targetedFieldNames: [[UInt8]] = [Array("cdn-cache-control".utf8)]
    /// The share of the time since `Last-Modified` a response without explicit expiry stays fresh (RFC 9111
    /// section 4.2.2).
    public var heuristicFraction = 0.1
    /// The longest heuristic lifetime, in seconds; 0 turns heuristic freshness off.
    public var heuristicMaximum: Int64 = 3600
    /// The longest lifetime, in seconds, of a stored 4xx or 5xx; nil leaves it to the response.
    public var maxErrorLifetime: Int64?
    /// Whether a response with `Set-Cookie` may be stored (its origin decides with `private` or `no-store`).
    public var storesSetCookie = true

    public init() {}

    /// The directives that decide for a response: the first valid targeted field's, else its `Cache-Control`.
    public func directives(of fields: HTTPFieldLines) -> CacheControl {
        if !targetedFields.isEmpty,
            let targeted = TargetedCacheControl.directives(in: fields, byteNames: targetedFieldNames)
        {
            return targeted
        }
        return CacheControl(fields: fields)
    }
}
