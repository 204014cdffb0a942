import NIOCore
import NIOHTTP1
import Synchronization

// Reading the whole cache, shard by shard under each shard's lock: the admin view, diagnostics and the figures
// the metrics read. Never the hit path.
extension ResponseCache {
    /// The stored responses whose keys `matches` takes, at most `limit`, shard by shard in no particular order, and
    /// whether more matched. Each shard's lock is held while it is read, as an invalidation holds it: for the admin
    /// listener's view of the cache, never the hit path.
    public func storedResponses(
        limit: Int,
        where matches: @Sendable (CacheKey) -> Bool
    ) -> (responses: [(key: CacheKey, response: CachedResponse)], more: Bool) {
        var found: [(key: CacheKey, response: CachedResponse)] = []
        var more = false
        for shard in shards where !more {
            let room = limit - found.count
            let (inShard, full) = shard.state.withLock { state in
                var inShard: [(key: CacheKey, response: CachedResponse)] = []
                var full = false
                state.store.visit { storedKey, slot in
                    guard case .response(let response) = slot else { return true }
                    let key = storedKey.cacheKey
                    guard matches(key) else { return true }
                    guard inShard.count < room else {
                        full = true
                        return false
                    }
                    inShard.append((key, response))
                    return true
                }
                return (inShard, full)
            }
            found += inShard
            more = full
        }
        return (found, more)
    }

    /// Calls `body` with every stored response, shard by shard: O(n), for tests and diagnostics.
    func forEachStoredResponse(_ body: (CachedResponse) -> Void) {
        for shard in shards {
            let entries = shard.state.withLock { state in
                var entries: [CachedResponse] = []
                state.store.forEachValue { slot in
                    if case .response(let entry) = slot { entries.append(entry) }
                }
                return entries
            }
            entries.forEach(body)
        }
    }

    /// The counters and sizes, summed over shards.
    public var statistics: Statistics {
        var total = Statistics()
        for shard in shards {
            shard.state.withLock { state in
                total.entries += state.store.count - state.variantLists
                total.partialEntries += state.partials
                total.partialHits += state.statistics.partialHits
                total.bytes += state.store.totalCost
                total.hits += state.statistics.hits
                total.misses += state.statistics.misses
                total.staleServes += state.statistics.staleServes
                total.revalidations += state.statistics.revalidations
                total.stores += state.statistics.stores
                total.evictions += state.statistics.evictions
                total.purged += state.statistics.purged
                total.softPurged += state.statistics.softPurged
                total.rejectedAsTooLarge += state.statistics.rejectedAsTooLarge
                total.compressionsDropped += state.statistics.compressionsDropped
                total.bodyBytesByForm["identity", default: 0] += state.forms.identity
                total.bodyBytesByForm["br", default: 0] += state.forms.brotli
                total.bodyBytesByForm["gzip", default: 0] += state.forms.gzip
                total.compressedEntries += state.forms.compressedEntries
            }
        }
        return total
    }
}
