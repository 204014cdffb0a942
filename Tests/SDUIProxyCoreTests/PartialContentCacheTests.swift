import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

/// Parts held in the response cache (``ResponseCache/storePartial(_:for:ticket:)``): in a key's slot while no whole
/// response is, in the budget, and reached by invalidations as entries are.
@Suite("Partial content in the response cache")
struct PartialContentCacheTests {
    private static let start = NIODeadline.now()

    private static func key(_ target: String = "/a") -> CacheKey { CacheKey(target: target, platform: "WEB") }

    private static func cache(maxBytes: Int = 1 << 20) -> ResponseCache {
        ResponseCache(maxBytes: maxBytes, maxEntries: 100, shardCount: 1)
    }

    private static func part(_ first: Int, _ last: Int, tags: [String] = []) -> PartialContent {
        PartialContent(
            etag: "\"v1\"",
            range: ContentRange(first: first, last: last, completeLength: 4096)!,
            body: ByteBuffer(repeating: UInt8(ascii: "x"), count: last - first + 1),
            headers: ["Content-Type": "text/plain"],
            tags: tags,
            storedAt: start,
            initialAge: 0,
            freshnessLifetime: 60
        )
    }

    private static func whole() -> CachedResponse {
        CachedResponse(
            status: .ok,
            headers: ["Content-Type": "text/plain", "Cache-Control": "max-age=60"],
            body: ByteBuffer(string: "whole"),
            metadata: CachedResponse.Metadata(storedAt: start, initialAge: 0, freshnessLifetime: 60)
        )
    }

    /// Holds `content` for `key` as a fill that began just before would.
    @discardableResult
    private static func hold(_ content: PartialContent, in cache: ResponseCache, for key: CacheKey = key()) -> Bool {
        let ticket = cache.beginFill(target: key.target)
        defer { cache.endFill(ticket) }
        return cache.storePartial(content, for: key, ticket: ticket)
    }

    @Test("RFC 9111 §3.3: parts are held and counted; a lookup of the whole misses; a whole response replaces them")
    func heldThenReplaced() {
        let cache = Self.cache()
        #expect(Self.hold(Self.part(0, 99), in: cache))
        #expect(cache.partialContent(for: Self.key())?.parts.first?.end == 100)
        guard case .miss = cache.lookup(Self.key(), requestHeaders: [:], now: Self.start) else {
            Issue.record("parts are not a whole response")
            return
        }
        var statistics = cache.statistics
        #expect(statistics.partialEntries == 1)
        #expect(statistics.entries == 1)
        #expect(statistics.bytes == Self.part(0, 99).byteCost)

        cache.recordPartialHit(Self.key())
        #expect(cache.statistics.partialHits == 1)
        #expect(cache.statistics.misses == 0, "the lookup's miss became the parts' hit")

        cache.store(Self.whole(), for: Self.key())
        statistics = cache.statistics
        #expect(statistics.partialEntries == 0)
        #expect(statistics.entries == 1)
        #expect(cache.partialContent(for: Self.key()) == nil)
    }

    @Test("parts never replace a whole response stored meanwhile")
    func neverOverWhole() {
        let cache = Self.cache()
        cache.store(Self.whole(), for: Self.key())
        #expect(!Self.hold(Self.part(0, 9), in: cache))
        guard case .fresh = cache.lookup(Self.key(), requestHeaders: [:], now: Self.start) else {
            Issue.record("the whole response stays")
            return
        }
        #expect(cache.statistics.partialEntries == 0)
    }

    @Test("parts count in the byte budget: evicted as entries are, and counted out")
    func evicted() {
        let cost = Self.part(0, 999).byteCost
        let cache = Self.cache(maxBytes: cost * 2 + cost / 2)
        for target in ["/a", "/b", "/c"] { Self.hold(Self.part(0, 999), in: cache, for: Self.key(target)) }
        let statistics = cache.statistics
        #expect(statistics.partialEntries == 2)
        #expect(statistics.evictions == 1)
        #expect(cache.partialContent(for: Self.key("/a")) == nil, "the least recently used went")
    }

    @Test(
        "hard and soft purges by URL, prefix and tag remove held parts",
        arguments: [
            CacheInvalidation(.targets(["/a"])), CacheInvalidation(.prefix("/")), CacheInvalidation(.tag("t")),
            CacheInvalidation(.targets(["/a"]), soft: true), CacheInvalidation(.all, soft: true),
        ]
    )
    func purged(invalidation: CacheInvalidation) {
        let cache = Self.cache()
        Self.hold(Self.part(0, 9, tags: ["t"]), in: cache)
        #expect(cache.invalidate(invalidation, now: Self.start).responses == 1)
        #expect(cache.partialContent(for: Self.key()) == nil)
        #expect(cache.statistics.partialEntries == 0)
    }

    @Test("parts whose fill an invalidation reached while it was in flight are not held")
    func voidedInFlight() {
        let cache = Self.cache()
        let ticket = cache.beginFill(target: "/a")
        cache.invalidate(CacheInvalidation(.targets(["/a"]), soft: true), now: Self.start)
        #expect(!cache.storePartial(Self.part(0, 9), for: Self.key(), ticket: ticket))
        cache.endFill(ticket)
        #expect(cache.partialContent(for: Self.key()) == nil)
    }
}
