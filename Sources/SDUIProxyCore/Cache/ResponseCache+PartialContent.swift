import NIOCore

/// Parts of representations (``PartialContent``): held in a key's slot while no whole response is, counted in
/// the byte budget and evicted as any entry, and replaced by the whole response once one is stored.
extension ResponseCache {
    /// The parts held for `key`, without counting or touching recency.
    public func partialContent(for key: CacheKey) -> PartialContent? {
        guard case .partial(let content)? = withShard(for: key, { $0.store.peek(key) }) else { return nil }
        return content
    }

    /// Counts a range answered from `key`'s parts as a hit, in place of the miss its lookup counted, and marks the
    /// parts most recently used.
    public func recordPartialHit(_ key: CacheKey) {
        withShard(for: key) { state in
            _ = state.store.value(forKey: key)
            state.statistics.misses -= 1
            state.statistics.hits += 1
            state.statistics.partialHits += 1
        }
    }

    /// Holds `content` for `key`, the answer of the fill that holds `ticket`: only where no whole response or list
    /// of variants is stored, and not once an invalidation since the fill started reaches it (checked before and
    /// after, as ``storeFill(_:for:ticket:)`` does; a soft one voids parts too, which are never served stale).
    /// - Returns: whether the parts are held.
    @discardableResult
    public func storePartial(_ content: PartialContent, for key: CacheKey, ticket: InvalidationHistory.Ticket) -> Bool {
        var (verdict, checked) = fillVerdict(since: ticket.sequence, target: key.target, tags: content.tags)
        // Never over a whole response or a list of variants, which a fill may have stored since this one began.
        guard case .store = verdict,
            insert(.partial(content), for: key, cost: content.byteCost, replaces: { $0?.isPartial ?? true })
        else { return false }
        (verdict, checked) = fillVerdict(since: checked, target: key.target, tags: content.tags)
        if case .store = verdict { return true }
        removePartial(for: key)
        return false
    }

    /// Lets go of the parts held for `key`, if any.
    public func removePartial(for key: CacheKey) {
        withShard(for: key) { state in
            guard state.store.peek(key)?.isPartial == true else { return }
            state.store.removeValue(forKey: key)
            state.partials -= 1
        }
    }
}
