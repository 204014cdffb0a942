/// One row of the fleet's shared log: what a replica did that every other replica must do too.
///
/// The log holds invalidations (purges, successful unsafe methods, a write queue's invalidate handlers) and fleet
/// prefetches. A row is three columns, `kind`, `value` and `soft`; ``init(kind:value:soft:)`` and ``columns`` convert
/// between them and this value, and nothing else knows the spelling.
public struct FleetLogEntry: Sendable, Hashable {
    public enum Payload: Sendable, Hashable {
        case invalidation(CacheInvalidation)
        case prefetch(FleetPrefetch)
        /// A kind this replica does not know, written by a newer one. It may have been an invalidation, so it is
        /// applied as the safest one there is: everything removed.
        case unknown(kind: String)
    }

    /// The log's id: ids grow in commit order of the rows' inserts, and a replica applies rows in id order.
    public var id: Int64
    public var payload: Payload

    public init(id: Int64, payload: Payload) {
        self.id = id
        self.payload = payload
    }

    /// The row's `kind`, `value` and `soft` columns for `payload`.
    public static func columns(for payload: Payload) -> (kind: String, value: String, soft: Bool) {
        switch payload {
        case .invalidation(let invalidation):
            switch invalidation.scope {
            // Normalised targets never hold a line break, so one separates them.
            case .targets(let targets): ("targets", targets.joined(separator: "\n"), invalidation.soft)
            case .prefix(let prefix): ("prefix", prefix, invalidation.soft)
            case .tag(let tag): ("tag", tag, invalidation.soft)
            case .all: ("all", "", invalidation.soft)
            }
        case .prefetch(let prefetch): ("prefetch", prefetch.encoded, false)
        case .unknown(let kind): (kind, "", false)
        }
    }

    /// The payload a row holds. A prefetch whose value cannot be read is nil: it is skipped, since a missed warm-up
    /// costs a miss, where a missed invalidation would serve stale content.
    public static func payload(kind: String, value: String, soft: Bool) -> Payload? {
        switch kind {
        case "targets":
            let targets = value.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
            return .invalidation(CacheInvalidation(.targets(targets), soft: soft))
        case "prefix": return .invalidation(CacheInvalidation(.prefix(value), soft: soft))
        case "tag": return .invalidation(CacheInvalidation(.tag(value), soft: soft))
        case "all": return .invalidation(CacheInvalidation(.all, soft: soft))
        case "prefetch": return FleetPrefetch(encoded: value).map(Payload.prefetch)
        default: return .unknown(kind: kind)
        }
    }
}

/// A `POST /prefetch` with `"fleet": true`, as every replica runs it.
public struct FleetPrefetch: Sendable, Hashable {
    public var urls: [String]
    public var platforms: [String]
    public var followActions: Int

    public init(urls: [String], platforms: [String], followActions: Int) {
        self.urls = urls
        self.platforms = platforms
        self.followActions = followActions
    }

    /// One `name=value` line per item. URLs and platform names never hold a line break: the admin endpoint
    /// checks both before a prefetch is written.
    var encoded: String {
        var lines = ["followActions=\(followActions)"]
        lines += platforms.map { "platform=\($0)" }
        lines += urls.map { "url=\($0)" }
        return lines.joined(separator: "\n")
    }

    init?(encoded: String) {
        var urls: [String] = []
        var platforms: [String] = []
        var followActions: Int?
        for line in encoded.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { return nil }
            let value = String(line[line.index(after: equals)...])
            switch line[..<equals] {
            case "followActions": followActions = Int(value)
            case "platform": platforms.append(value)
            case "url": urls.append(value)
            default: return nil
            }
        }
        guard let followActions, !urls.isEmpty else { return nil }
        self.init(urls: urls, platforms: platforms, followActions: followActions)
    }
}
