import NIOCore
import SDUIProxyCore

/// Where every invalidation made on this replica goes: admin purges, successful unsafe methods and the write
/// queue's invalidate handlers. It is applied to this replica's cache at once and, when the replica is one of a
/// fleet, written to the fleet's log for the others.
///
/// Invalidations that come from the log are applied to the cache directly, never through here, or they would be
/// written again.
public final class CacheInvalidator: Sendable {
    public let cache: ResponseCache
    /// The fleet's log; nil for a single replica.
    public let fleet: FleetLog?

    public init(cache: ResponseCache, fleet: FleetLog? = nil) {
        self.cache = cache
        self.fleet = fleet
    }

    /// Applies `invalidation` here, to stored responses and fills in flight alike, and hands it to the fleet's log
    /// without waiting (the answer of the request that made it does not wait for PostgreSQL). Returns what it
    /// reached here.
    @discardableResult
    public func invalidate(_ invalidation: CacheInvalidation, now: NIODeadline = .now()) -> ResponseCache.Reach {
        let reached = cache.invalidate(invalidation, now: now)
        fleet?.record(invalidation)
        return reached
    }

    /// Applies `invalidation` here, then waits for the fleet's log to have it. The fan-out is nil for a single
    /// replica.
    public func invalidateAcrossFleet(
        _ invalidation: CacheInvalidation,
        now: NIODeadline = .now()
    ) async -> (reached: ResponseCache.Reach, fanOut: FleetLog.FanOut?) {
        let reached = cache.invalidate(invalidation, now: now)
        guard let fleet else { return (reached, nil) }
        return (reached, await fleet.invalidated(invalidation))
    }
}
