/// What the cache did for a request, as the `X-Cache` header, metrics and access logs report it.
public enum CacheResult: String, Sendable, CaseIterable {
    /// Answered from a fresh entry.
    case hit = "HIT"
    /// Fetched from the backend and stored.
    case miss = "MISS"
    /// Not cacheable (request or response); fetched and passed on.
    case bypass = "BYPASS"
    /// Answered from a stale entry (stale-while-revalidate, stale-if-error).
    case stale = "STALE"
    /// A stale entry confirmed by the backend with a 304.
    case revalidated = "REVALIDATED"
}
