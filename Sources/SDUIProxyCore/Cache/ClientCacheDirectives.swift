import NIOCore
import NIOHTTP1

/// What a client's own `Cache-Control` asks of the cache (RFC 9111 section 5.2.1), and what the cache does about
/// it with what it found.
///
/// `only-if-cached` is always obeyed: the answer comes from the cache or is a 504, and nothing goes upstream,
/// not even a background refresh. `no-cache` and `max-age=0` ask for a fresh answer from the origin; honouring
/// them would let any client turn every hit into a backend request, so they count only with
/// `cache.honorClientNoCache`, and then a fresh entry is revalidated (a conditional request, a 304 when it still
/// holds). `max-stale` counts only beside `only-if-cached`, to accept a stale entry rather than a 504. Other
/// request directives (`max-age` above 0, `min-fresh`) are not acted on, and neither is `Pragma`.
public struct ClientCacheDirectives: Sendable, Equatable {
    public var onlyIfCached = false
    /// `no-cache`, or `max-age=0`.
    public var asksValidation = false
    public var maxStale: Int64?

    public init() {}

    public init(headers: HTTPHeaders) {
        guard headers.contains(name: "cache-control") else { return }
        let directives = CacheControl(headers: headers)
        onlyIfCached = directives.onlyIfCached
        asksValidation = directives.noCache || directives.maxAge == 0
        maxStale = directives.maxStale
    }

    /// What the cache does.
    public enum Step: Sendable {
        /// Answer with the fresh entry.
        case hit(CachedResponse)
        /// Answer with the stale entry, and refresh it in the background (`stale-while-revalidate`).
        case staleWhileRefreshing(CachedResponse)
        /// Answer with the stale entry and nothing else (`only-if-cached` with a `max-stale` that covers it).
        case stale(CachedResponse)
        /// Ask the backend; `staleEntry` is revalidated, stands in if the backend fails, or is replaced.
        case fetch(staleEntry: CachedResponse?)
        /// `only-if-cached` and nothing usable stored: 504, nothing sent upstream.
        case notCached
    }

    /// The step for what the cache `found` at `now`; `honorsNoCache` is `cache.honorClientNoCache`.
    public func step(found: ResponseCache.Lookup, honorsNoCache: Bool, at now: NIODeadline) -> Step {
        let validates = honorsNoCache && asksValidation
        switch found {
        case .fresh(let entry):
            return validates && !onlyIfCached ? .fetch(staleEntry: entry) : .hit(entry)
        case .stale(let entry):
            if onlyIfCached {
                let staleness = entry.stalenessNanoseconds(at: now)
                guard let maxStale, staleness <= maxStale &* 1_000_000_000, !Self.forbidsStale(entry) else {
                    return .notCached
                }
                return .stale(entry)
            }
            if !validates, entry.mayServeWhileRevalidating(at: now) { return .staleWhileRefreshing(entry) }
            return .fetch(staleEntry: entry)
        case .miss, .varyMiss:
            return onlyIfCached ? .notCached : .fetch(staleEntry: nil)
        }
    }

    /// Whether the entry's own directives forbid serving it stale at all (RFC 9111 section 4.2.4): a client's
    /// `max-stale` does not outweigh them.
    private static func forbidsStale(_ entry: CachedResponse) -> Bool {
        entry.revalidation.forbidsStale
    }
}
