import NIOCore
import Synchronization

/// The in-memory response cache: LRU under a byte budget and an entry limit, split into shards that each
/// have their own lock, so event loops looking up different keys never wait for one another.
///
/// The budget is divided evenly between shards; a key's shard is chosen by its hash. An entry larger than
/// one shard's budget is not stored.
public final class ResponseCache: Sendable {
    /// Counters of what happened to lookups and entries, summed over shards.
    public struct Statistics: Equatable, Sendable {
        public var entries = 0
        public var bytes = 0
        public var hits = 0
        public var misses = 0
        public var stores = 0
        public var evictions = 0
        public var rejectedAsTooLarge = 0

        public init() {}
    }

    /// The outcome of a lookup.
    public enum Lookup: Sendable {
        case fresh(CachedResponse)
        case stale(CachedResponse)
        case miss
    }

    private final class Shard: Sendable {
        struct State {
            var store: LRUStore<CacheKey, CachedResponse>
            var statistics = Statistics()
        }

        let state: Mutex<State>

        init(costLimit: Int, countLimit: Int) {
            state = Mutex(State(store: LRUStore(costLimit: costLimit, countLimit: countLimit)))
        }
    }

    private let shards: [Shard]
    private let shardMask: Int
    /// The largest entry a shard takes.
    public let maximumEntryCost: Int

    /// - Parameters:
    ///   - maxBytes: the total byte budget.
    ///   - maxEntries: the total entry limit.
    ///   - shardCount: a power of two; by default one shard per 4 MiB of budget, between 1 and 32.
    public init(maxBytes: Int, maxEntries: Int, shardCount: Int? = nil) {
        let count = shardCount ?? Self.defaultShardCount(maxBytes: maxBytes)
        precondition(count > 0 && count & (count - 1) == 0, "the shard count must be a power of two")
        let costLimit = max(1, maxBytes / count)
        let countLimit = max(1, maxEntries / count)
        shards = (0..<count).map { _ in Shard(costLimit: costLimit, countLimit: countLimit) }
        shardMask = count - 1
        maximumEntryCost = costLimit
    }

    static func defaultShardCount(maxBytes: Int) -> Int {
        var count = 1
        while count < 32, maxBytes / (count * 2) >= 4 << 20 { count *= 2 }
        return count
    }

    @inline(__always)
    private func shard(for key: CacheKey) -> Shard {
        shards[key.hashCode & shardMask]
    }

    /// Finds the entry for `key` and marks it most recently used. Fresh entries count as hits and absent
    /// ones as misses; what a stale entry turns into is for the caller to record.
    public func lookup(_ key: CacheKey, now: NIODeadline) -> Lookup {
        shard(for: key).state.withLock { state -> Lookup in
            guard let entry = state.store.value(forKey: key) else {
                state.statistics.misses += 1
                return .miss
            }
            guard entry.isFresh(at: now) else { return .stale(entry) }
            state.statistics.hits += 1
            return .fresh(entry)
        }
    }

    /// Counts a lookup that was answered from a stale entry.
    public func recordHit(_ key: CacheKey) {
        shard(for: key).state.withLock { $0.statistics.hits += 1 }
    }

    /// Counts a lookup whose stale entry could not be used.
    public func recordMiss(_ key: CacheKey) {
        shard(for: key).state.withLock { $0.statistics.misses += 1 }
    }

    /// The entry for `key` without touching recency or statistics.
    public func peek(_ key: CacheKey) -> CachedResponse? {
        shard(for: key).state.withLock { $0.store.peek(key) }
    }

    /// Stores `response` for `key`, evicting least recently used entries of its shard as needed.
    ///
    /// - Returns: whether it was stored (false when it alone exceeds a shard's budget).
    @discardableResult
    public func store(_ response: CachedResponse, for key: CacheKey) -> Bool {
        shard(for: key).state.withLock { state in
            var evictions = 0
            let stored = state.store.insert(response, forKey: key, cost: response.byteCost) { _, _ in evictions += 1 }
            state.statistics.evictions += evictions
            if stored { state.statistics.stores += 1 } else { state.statistics.rejectedAsTooLarge += 1 }
            return stored
        }
    }

    /// Removes the entry for `key`, if any.
    @discardableResult
    public func remove(_ key: CacheKey) -> Bool {
        shard(for: key).state.withLock { $0.store.removeValue(forKey: key) != nil }
    }

    /// Removes every entry whose key matches; returns how many went. Visits every shard: for admin use.
    @discardableResult
    public func removeAll(where matches: @Sendable (CacheKey) -> Bool) -> Int {
        var removed = 0
        for shard in shards {
            removed += shard.state.withLock { state in state.store.removeAll { key, _ in matches(key) } }
        }
        return removed
    }

    /// The counters and sizes, summed over shards.
    public var statistics: Statistics {
        var total = Statistics()
        for shard in shards {
            shard.state.withLock { state in
                total.entries += state.store.count
                total.bytes += state.store.totalCost
                total.hits += state.statistics.hits
                total.misses += state.statistics.misses
                total.stores += state.statistics.stores
                total.evictions += state.statistics.evictions
                total.rejectedAsTooLarge += state.statistics.rejectedAsTooLarge
            }
        }
        return total
    }
}
