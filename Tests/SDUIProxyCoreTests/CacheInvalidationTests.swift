import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("Invalidations applied to the cache: hard ones remove, soft ones make stale as of the purge")
struct CacheInvalidationTests {
    private static let start = NIODeadline.now()

    private static func entry(
        _ body: String = "{}",
        cacheControl: String = "max-age=300",
        tags: String? = nil,
        etag: String? = nil,
        initialAge: Int64 = 0,
        storedAt: NIODeadline = start,
        vary: (names: [String], variant: String)? = nil
    ) -> CachedResponse {
        var headers: HTTPHeaders = ["Content-Type": "application/json", "Cache-Control": cacheControl]
        if let tags { headers.add(name: "Surrogate-Key", value: tags) }
        if let etag { headers.add(name: "ETag", value: etag) }
        var metadata = CachedResponse.Metadata(
            storedAt: storedAt,
            initialAge: initialAge,
            freshnessLifetime: CacheControl(headers: headers).maxAge ?? 0
        )
        if let vary {
            metadata.varyNames = vary.names
            metadata.variant = vary.variant
        }
        return CachedResponse(status: .ok, headers: headers, body: ByteBuffer(string: body), metadata: metadata)
    }

    private static func key(_ target: String, _ platform: String = "WEB") -> CacheKey {
        CacheKey(target: target, platform: platform)
    }

    /// `/a` on two platforms, two screens tagged `screens`, and `/other`, stored at ``start``.
    private static func filledCache() -> ResponseCache {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100, shardCount: 4)
        cache.store(entry(tags: "all"), for: key("/a"))
        cache.store(entry(tags: "all"), for: key("/a", "IOS"))
        cache.store(entry(tags: "screens all"), for: key("/screens/1"))
        cache.store(entry(tags: "screens all"), for: key("/screens/2?tab=1"))
        cache.store(entry(), for: key("/screensaver"))
        return cache
    }

    private static let allKeys = [
        key("/a"), key("/a", "IOS"), key("/screens/1"), key("/screens/2?tab=1"), key("/screensaver"),
    ]

    private enum State: Equatable {
        case fresh, stale, miss
    }

    private static func state(_ cache: ResponseCache, _ key: CacheKey, at now: NIODeadline) -> State {
        switch cache.lookup(key, requestHeaders: [:], now: now) {
        case .fresh: .fresh
        case .stale: .stale
        case .miss, .varyMiss: .miss
        }
    }

    static let scopes: [(CacheInvalidation.Scope, reached: [CacheKey])] = [
        (.targets(["/a", "/screensaver"]), [key("/a"), key("/a", "IOS"), key("/screensaver")]),
        (.targets(["/screens/2"]), []),
        (.prefix("/screens"), [key("/screens/1"), key("/screens/2?tab=1")]),
        (.prefix("/screens/2?"), [key("/screens/2?tab=1")]),
        (.tag("screens"), [key("/screens/1"), key("/screens/2?tab=1")]),
        (.tag("all"), [key("/a"), key("/a", "IOS"), key("/screens/1"), key("/screens/2?tab=1")]),
        (.all, allKeys),
    ]

    @Test("a hard invalidation removes what its scope reaches, and only that", arguments: scopes)
    func hard(scope: CacheInvalidation.Scope, reached: [CacheKey]) {
        let cache = Self.filledCache()
        let now = Self.start + .seconds(10)
        #expect(cache.invalidate(CacheInvalidation(scope), now: now).responses == reached.count)
        for key in Self.allKeys {
            #expect(Self.state(cache, key, at: now) == (reached.contains(key) ? .miss : .fresh), "\(key)")
        }
        let statistics = cache.statistics
        #expect(statistics.purged == reached.count)
        #expect(statistics.softPurged == 0)
        #expect(statistics.entries == Self.allKeys.count - reached.count)
    }

    @Test("a soft invalidation makes stale what its scope reaches, keeps it stored, and counts it", arguments: scopes)
    func soft(scope: CacheInvalidation.Scope, reached: [CacheKey]) {
        let cache = Self.filledCache()
        let bytes = cache.statistics.bytes
        let now = Self.start + .seconds(10)
        #expect(cache.invalidate(CacheInvalidation(scope, soft: true), now: now).responses == reached.count)
        for key in Self.allKeys {
            #expect(Self.state(cache, key, at: now) == (reached.contains(key) ? .stale : .fresh), "\(key)")
        }
        let statistics = cache.statistics
        #expect(statistics.softPurged == reached.count)
        #expect(statistics.purged == 0)
        #expect(statistics.entries == Self.allKeys.count)
        #expect(statistics.bytes == bytes)
    }

    @Test("soft on a fresh entry: stale at once, its stale-while-revalidate and stale-if-error windows from the purge")
    func softOnFreshEntry() throws {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let stored = Self.entry(
            #"{"v":1}"#,
            cacheControl: "max-age=300, stale-while-revalidate=60, stale-if-error=120",
            etag: "\"v1\"",
            initialAge: 5
        )
        cache.store(stored, for: Self.key("/s"))
        let purgedAt = Self.start + .seconds(10)
        #expect(cache.invalidate(CacheInvalidation(.targets(["/s"]), soft: true), now: purgedAt).responses == 1)

        guard case .stale(let entry) = cache.lookup(Self.key("/s"), requestHeaders: [:], now: purgedAt) else {
            Issue.record("expected the entry stale right after the purge")
            return
        }
        #expect(!entry.isFresh(at: purgedAt))
        #expect(entry.remainingLifetime(at: purgedAt) == 0)
        #expect(entry.stalenessNanoseconds(at: purgedAt) == 0)
        #expect(entry.mayServeWhileRevalidating(at: purgedAt))
        #expect(entry.mayServeWhileRevalidating(at: purgedAt + .seconds(60)))
        #expect(!entry.mayServeWhileRevalidating(at: purgedAt + .seconds(61)))
        #expect(entry.mayServeOnError(at: purgedAt + .seconds(120)))
        #expect(!entry.mayServeOnError(at: purgedAt + .seconds(121)))
        // The same response: its age goes on from when it was stored, its validators and body are kept.
        #expect(entry.ageSeconds(at: purgedAt) == 15)
        #expect(entry.upstreamETag == "\"v1\"")
        #expect(entry.body == ByteBuffer(string: #"{"v":1}"#))
        #expect(entry.encodedHead() == stored.encodedHead())
        #expect(entry.byteCost == stored.byteCost)
        #expect(!cache.hasFreshEntry(Self.key("/s"), requestHeaders: [:], now: purgedAt))
    }

    @Test("soft on an entry already stale leaves it as it is: no window starts again")
    func softOnStaleEntry() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let stored = Self.entry(cacheControl: "max-age=10, stale-while-revalidate=60")
        cache.store(stored, for: Self.key("/s"))
        let purgedAt = Self.start + .seconds(30)
        #expect(cache.invalidate(CacheInvalidation(.all, soft: true), now: purgedAt).responses == 1)
        guard case .stale(let entry) = cache.lookup(Self.key("/s"), requestHeaders: [:], now: purgedAt) else {
            Issue.record("expected the stale entry")
            return
        }
        #expect(entry === stored)
        #expect(entry.stalenessNanoseconds(at: purgedAt) == 20_000_000_000)
        #expect(!entry.mayServeWhileRevalidating(at: Self.start + .seconds(71)))
        #expect(cache.statistics.softPurged == 1)
    }

    @Test("a soft purge never makes an entry fresher, however often it is repeated")
    func softRepeated() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        cache.store(Self.entry(cacheControl: "max-age=300, stale-while-revalidate=60"), for: Self.key("/s"))
        let first = Self.start + .seconds(10)
        cache.invalidate(CacheInvalidation(.targets(["/s"]), soft: true), now: first)
        cache.invalidate(CacheInvalidation(.targets(["/s"]), soft: true), now: first + .seconds(50))
        guard case .stale(let entry) = cache.lookup(Self.key("/s"), requestHeaders: [:], now: first + .seconds(50))
        else {
            Issue.record("expected the stale entry")
            return
        }
        // The window counts from the first purge.
        #expect(entry.stalenessNanoseconds(at: first + .seconds(50)) == 50_000_000_000)
        #expect(!entry.mayServeWhileRevalidating(at: first + .seconds(61)))
    }

    @Test("a response stored after a soft purge replaces the purged one and is fresh as any")
    func softThenStore() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        cache.store(Self.entry(#"{"v":1}"#), for: Self.key("/s"))
        let purgedAt = Self.start + .seconds(10)
        cache.invalidate(CacheInvalidation(.prefix("/"), soft: true), now: purgedAt)
        cache.store(Self.entry(#"{"v":2}"#, storedAt: purgedAt + .seconds(1)), for: Self.key("/s"))
        guard case .fresh(let entry) = cache.lookup(Self.key("/s"), requestHeaders: [:], now: purgedAt + .seconds(2))
        else {
            Issue.record("expected the new entry fresh")
            return
        }
        #expect(entry.body == ByteBuffer(string: #"{"v":2}"#))
        #expect(entry.remainingLifetime(at: purgedAt + .seconds(2)) == 299)
        let statistics = cache.statistics
        #expect(statistics.entries == 1)
        #expect(statistics.stores == 2)
        #expect(statistics.softPurged == 1)
    }

    @Test("responses that vary are reached in every variant, and their list of headers stays for a soft purge")
    func variants() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        for language in ["en", "pt"] {
            cache.store(Self.entry(vary: (["accept-language"], language)), for: Self.key("/v"))
        }
        let now = Self.start + .seconds(1)
        #expect(cache.invalidate(CacheInvalidation(.targets(["/v"]), soft: true), now: now).responses == 2)
        for language in ["en", "pt"] {
            guard case .stale = cache.lookup(Self.key("/v"), requestHeaders: ["Accept-Language": language], now: now)
            else {
                Issue.record("expected the \(language) variant stale")
                continue
            }
        }
        #expect(cache.statistics.entries == 2)
        #expect(cache.invalidate(CacheInvalidation(.targets(["/v"])), now: now).responses == 2)
        #expect(cache.statistics.entries == 0)
        #expect(cache.statistics.bytes == 0)
    }

    @Test("the LRU store replaces values in place, keeping their cost and recency")
    func replaceValuesInPlace() {
        var store = LRUStore<String, Int>(costLimit: 100, countLimit: 10)
        for (key, value) in [("a", 1), ("b", 2), ("c", 3)] { store.insert(value, forKey: key, cost: 10) }
        _ = store.removeValue(forKey: "b")
        store.replaceValues { key, value in key == "c" ? value * 10 : nil }
        #expect(store.peek("c") == 30)
        #expect(store.peek("a") == 1)
        #expect(store.keysByRecency == ["c", "a"])
        #expect(store.totalCost == 20)
    }
}
