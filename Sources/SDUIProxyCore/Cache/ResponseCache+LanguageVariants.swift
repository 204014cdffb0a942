import NIOCore
import NIOHTTP1

/// Language variants (``LanguageVariants``): a response filed under the keys of other spellings of the language it
/// is in, and found there by requests whose own variant is missing.
extension ResponseCache {
    /// A fresh entry in the language `range` names (``LanguageVariants``), filed under `alternate` (the key a
    /// request stating just that range would have, `alternateHeaders` its fields): what answers a request whose
    /// own variant was missing and that prefers `range` most. Found, it is marked most recently used and counted
    /// as a hit in place of the miss the request's own lookup counted (of `missed`, with `requestHeaders`).
    public func languageVariant(
        _ alternate: CacheKey,
        range: String,
        alternateHeaders: HTTPHeaders,
        now: NIODeadline,
        insteadOf missed: CacheKey,
        requestHeaders: HTTPHeaders
    ) -> CachedResponse? {
        let (key, slot) = peekSelected(alternate, requestHeaders: alternateHeaders)
        guard case .response(let entry)? = slot, entry.isFresh(at: now), !entry.revalidation.contains(.noCache),
            let language = entry.headers.first(name: "content-language"),
            LanguageVariants.answers(contentLanguage: language, range: range)
        else { return nil }
        withShard(for: key) { state in
            _ = state.store.value(forKey: key)
            state.statistics.hits += 1
        }
        // The miss was counted where the request's own lookup ended: under its variant's key when the target varies.
        let counted = peekSelected(missed, requestHeaders: requestHeaders).key
        withShard(for: counted) { $0.statistics.misses -= 1 }
        return entry
    }

    /// Files `entry`, which a fill has just stored with `ticket` (``storeFill(_:for:ticket:)``), also under `key`
    /// and `variant`: the key a request stating just the language it is in would have. Nothing is filed where a
    /// response is stored already (what the backend chose for that request stays), nor once an invalidation has
    /// reached the fill, before or while it is filed.
    public func fileAlternate(
        _ entry: CachedResponse,
        for key: CacheKey,
        variant: String,
        ticket: InvalidationHistory.Ticket
    ) {
        let filed = entry.varyNames.isEmpty ? key : key.selectingVariant(variant)
        guard withShard(for: filed, { $0.store.peek(filed) == nil }) else { return }
        var (verdict, checked) = fillVerdict(since: ticket.sequence, target: key.target, tags: entry.tags)
        guard case .store = verdict, store(entry, for: key, variant: variant) else { return }
        (verdict, checked) = fillVerdict(since: checked, target: key.target, tags: entry.tags)
        if case .store = verdict { return }
        remove(entry, storedFor: key, variant: variant, countingAsPurged: false)
    }
}
