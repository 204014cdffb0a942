import Dispatch
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("Storing a fill's answer: an invalidation that came while it was in flight voids it or stores it stale")
struct CacheFillStoreTests {
    private static let start = NIODeadline.now()

    private static func entry(
        _ body: String = "{}",
        tags: String? = nil,
        storedAt: NIODeadline = start
    )
        -> CachedResponse
    {
        var headers: HTTPHeaders = ["Content-Type": "application/json", "Cache-Control": "max-age=300"]
        if let tags { headers.add(name: "Surrogate-Key", value: tags) }
        var metadata = CachedResponse.Metadata(storedAt: storedAt, initialAge: 0, freshnessLifetime: 300)
        metadata.tagHeader = "surrogate-key"
        return CachedResponse(status: .ok, headers: headers, body: ByteBuffer(string: body), metadata: metadata)
    }

    private static func key(_ target: String) -> CacheKey { CacheKey(target: target, platform: "WEB") }

    private static func cache() -> ResponseCache { ResponseCache(maxBytes: 1 << 20, maxEntries: 100, shardCount: 4) }

    private enum State: Equatable { case fresh, stale, miss }

    private static func state(_ cache: ResponseCache, _ target: String, at now: NIODeadline = start) -> State {
        switch cache.lookup(key(target), requestHeaders: [:], now: now) {
        case .fresh: .fresh
        case .stale: .stale
        case .miss, .varyMiss: .miss
        }
    }

    @Test("with no invalidation in between, the answer is stored as it is")
    func untouched() {
        let cache = Self.cache()
        let ticket = cache.beginFill(target: "/a")
        cache.invalidate(CacheInvalidation(.targets(["/b"])), now: Self.start)
        guard case .stored = cache.storeFill(Self.entry(), for: Self.key("/a"), ticket: ticket) else {
            Issue.record("expected it stored")
            return
        }
        cache.endFill(ticket)
        #expect(Self.state(cache, "/a") == .fresh)
        #expect(cache.fillsInFlight == 0)
    }

    @Test("a hard purge of its target, prefix, tag or everything while in flight: not stored, and counted in flight")
    func hardPurges() {
        let scopes: [CacheInvalidation.Scope] = [.targets(["/a/1"]), .prefix("/a"), .tag("t"), .all]
        for scope in scopes {
            let cache = Self.cache()
            let ticket = cache.beginFill(target: "/a/1")
            let reach = cache.invalidate(CacheInvalidation(scope), now: Self.start)
            #expect(reach == ResponseCache.Reach(responses: 0, fillsInFlight: 1), "\(scope)")
            guard
                case .voided(let reason) = cache.storeFill(
                    Self.entry(tags: "t u"),
                    for: Self.key("/a/1"),
                    ticket: ticket
                )
            else {
                Issue.record("expected \(scope) to void the fill")
                continue
            }
            #expect(reason.contains("invalidated while in flight"))
            #expect(Self.state(cache, "/a/1") == .miss)
            #expect(cache.statistics.entries == 0)
        }
    }

    @Test("a tag purge voids only the answers that carry the tag")
    func tagNotCarried() {
        let cache = Self.cache()
        let ticket = cache.beginFill(target: "/a")
        cache.invalidate(CacheInvalidation(.tag("t")), now: Self.start)
        guard case .stored = cache.storeFill(Self.entry(tags: "other"), for: Self.key("/a"), ticket: ticket) else {
            Issue.record("expected it stored")
            return
        }
        #expect(Self.state(cache, "/a") == .fresh)
    }

    @Test("a soft purge while in flight stores the answer stale as of the purge")
    func softPurge() {
        let cache = Self.cache()
        let ticket = cache.beginFill(target: "/s")
        let purgedAt = Self.start + .seconds(1)
        cache.invalidate(CacheInvalidation(.targets(["/s"]), soft: true), now: purgedAt)
        let answer = Self.entry(storedAt: purgedAt + .seconds(1))
        guard case .storedStale(let stored) = cache.storeFill(answer, for: Self.key("/s"), ticket: ticket) else {
            Issue.record("expected it stored stale")
            return
        }
        #expect(!stored.isFresh(at: purgedAt + .seconds(1)))
        #expect(Self.state(cache, "/s", at: purgedAt + .seconds(1)) == .stale)
    }

    @Test("a fill that starts after a purge is not concerned by it")
    func startedAfter() {
        let cache = Self.cache()
        cache.invalidate(CacheInvalidation(.all), now: Self.start)
        let ticket = cache.beginFill(target: "/a")
        guard case .stored = cache.storeFill(Self.entry(), for: Self.key("/a"), ticket: ticket) else {
            Issue.record("expected it stored")
            return
        }
        #expect(cache.mayJoinFill(startedAfter: ticket.sequence, target: "/a"))
    }

    @Test(
        "a purge racing the store never leaves the answer fresh, whichever thread comes first",
        arguments: [false, true]
    )
    func racingPurge(soft: Bool) {
        let cache = Self.cache()
        for round in 0..<2_000 {
            let target = "/race/\(round)"
            let ticket = cache.beginFill(target: target)
            let answer = Self.entry()
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                if index == 0 {
                    _ = cache.storeFill(answer, for: Self.key(target), ticket: ticket)
                } else {
                    cache.invalidate(CacheInvalidation(.prefix("/race"), soft: soft), now: Self.start)
                }
            }
            cache.endFill(ticket)
            #expect(Self.state(cache, target) == (soft ? .stale : .miss), "round \(round)")
        }
        #expect(cache.fillsInFlight == 0)
    }
}
