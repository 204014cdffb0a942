import NIOCore
import Synchronization

/// Invalidations applied to the stored responses and held parts, shard by shard: purges by URL, prefix, tag or
/// all, hard or soft. Never the hit path.
extension ResponseCache {
    /// What an invalidation reached.
    public struct Reach: Sendable, Equatable {
        /// The stored responses it removed, or made stale.
        public var responses: Int
        /// The fills in flight it reached (for a tag, every fill in flight: their answers' tags decide).
        public var fillsInFlight: Int

        public init(responses: Int, fillsInFlight: Int = 0) {
            self.responses = responses
            self.fillsInFlight = fillsInFlight
        }
    }

    /// Applies `invalidation` to the stored responses (every platform and variant its scope reaches) and to the
    /// fills in flight, and returns what it reached. Every invalidation comes here, whoever asked for it.
    ///
    /// A hard one removes the responses. A soft one leaves them stale as of `now` (``CachedResponse/softPurged(at:)``):
    /// the next lookup finds them stale, so stale-while-revalidate answers with them at once and refreshes in the
    /// background, stale-if-error may stand them in for a failing backend, and the rest are revalidated (a
    /// conditional request when they have validators). Their windows count from `now`; one already stale is left
    /// as it is (and counted as reached). Whatever refreshes them is stored as any response is.
    ///
    /// It is recorded first, so that a fill in flight that it reaches is not stored, or stored stale
    /// (``storeFill(_:for:ticket:)``), and no later request joins that fill (``mayJoinFill(startedAfter:target:)``).
    ///
    /// Visits every shard: for invalidation and admin use, not the hit path.
    @discardableResult
    public func invalidate(_ invalidation: CacheInvalidation, now: NIODeadline) -> Reach {
        // Recorded before the shards are visited: a fill that stores after this visit finds the record
        // (``storeFill(_:for:ticket:)`` checks after it stores), and one that stored before it is reached here.
        let fillsReached = history.withLock { history in
            let (sequence, reached) = history.record(invalidation, at: now)
            lastInvalidation.store(sequence, ordering: .sequentiallyConsistent)
            return reached
        }
        // The same rule that judges the fills in flight; a list of varying headers carries no tags.
        let matches: @Sendable (_ key: StoredCacheKey, _ tags: [String]) -> Bool = { key, tags in
            invalidation.mayReach(key, tags: tags)
        }
        // Parts are removed either way: stale parts answer nothing, and what a soft invalidation keeps for is
        // serving stale.
        let responses =
            invalidation.soft
            ? markStale(where: matches, now: now) + remove(where: matches, partsOnly: true)
            : remove(where: matches, partsOnly: false)
        return Reach(responses: responses, fillsInFlight: fillsReached)
    }

    /// Removes every stored response (or, with `partsOnly`, every held part of one) whose normalised target and
    /// tags match, and returns how many went.
    private func remove(
        where matches: @Sendable (_ key: StoredCacheKey, _ tags: [String]) -> Bool,
        partsOnly: Bool
    ) -> Int {
        var removed = 0
        // Responses removed per target, applied to the counts after each shard's lock.
        var removedTargets: [String: Int] = [:]
        for shard in shards {
            removed += shard.state.withLock { state in
                // Responses are counted; the lists of a target's varying headers go with them uncounted.
                var responses = 0
                var lists = 0
                var partials = 0
                state.store.removeAll { key, slot in
                    switch slot {
                    case .response(let entry):
                        guard !partsOnly, matches(key, entry.tags) else { return false }
                        responses += 1
                        state.forms.count(slot, -1)
                        removedTargets[key.target, default: 0] -= 1
                        return true
                    case .variants:
                        guard !partsOnly, matches(key, []) else { return false }
                        lists += 1
                        return true
                    case .partial(let content):
                        guard matches(key, content.tags) else { return false }
                        partials += 1
                        return true
                    }
                }
                state.variantLists -= lists
                state.partials -= partials
                responses += partials
                state.statistics.purged += responses
                return responses
            }
            storedTargets.apply(removedTargets)
            removedTargets.removeAll(keepingCapacity: true)
        }
        return removed
    }

    /// Replaces every fresh stored response whose normalised target matches by its copy stale as of `now`, in
    /// place (its cost and recency unchanged), and returns how many matched. The lists of varying headers stay.
    private func markStale(
        where matches: @Sendable (_ key: StoredCacheKey, _ tags: [String]) -> Bool,
        now: NIODeadline
    )
        -> Int
    {
        var reached = 0
        for shard in shards {
            reached += shard.state.withLock { state in
                var responses = 0
                state.store.replaceValues { key, slot in
                    guard case .response(let entry) = slot, matches(key, entry.tags) else { return nil }
                    responses += 1
                    return entry.softPurged(at: now).map(Slot.response)
                }
                state.statistics.softPurged += responses
                return responses
            }
        }
        return reached
    }
}

extension CacheInvalidation {
    /// ``mayReach(target:tags:)`` for a stored key, its target read where the key keeps it: a purge visits every
    /// entry of the cache under its shard's lock, and making each target a string again would allocate for each.
    fileprivate func mayReach(_ key: StoredCacheKey, tags: [String]) -> Bool {
        switch scope {
        case .targets(let targets): targets.contains { key.hasTarget($0) }
        case .prefix(let prefix): key.withTarget { PathPrefix(prefix).matches(bytes: $0) }
        case .tag, .all: mayReach(target: "", tags: tags)
        }
    }
}
