/// One invalidation of stored responses, whatever asked for it: an admin purge, a successful unsafe method, a
/// write queue's invalidate handler, or another replica of the fleet.
///
/// It is a value so that the same invalidation can be applied to this replica's cache at once and written to
/// the fleet's log, to be applied the same way by every other replica.
public struct CacheInvalidation: Sendable, Hashable, CustomStringConvertible {
    /// Which stored responses it reaches, in every platform and variant.
    public enum Scope: Sendable, Hashable {
        /// These normalised targets (`path?query`) exactly.
        case targets([String])
        /// Targets under this prefix, by whole path segments (``PathPrefix``).
        case prefix(String)
        /// Responses that carry this tag.
        case tag(String)
        /// Everything.
        case all
    }

    public var scope: Scope
    /// Marks the responses stale instead of removing them, so stale-while-revalidate and stale-if-error may still
    /// answer with them while the first request refreshes (a soft purge).
    public var soft: Bool

    public init(_ scope: Scope, soft: Bool = false) {
        self.scope = scope
        self.soft = soft
    }

    public var description: String {
        let what =
            switch scope {
            case .targets(let targets): "targets \(targets.joined(separator: " "))"
            case .prefix(let prefix): "prefix \(prefix)"
            case .tag(let tag): "tag \(tag)"
            case .all: "all"
            }
        return soft ? "soft \(what)" : what
    }
}
