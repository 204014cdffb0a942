import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

/// A client's own request directives (RFC 9111 section 5.2.1) against what the cache found, decided directly.
@Suite struct ClientCacheDirectivesTests {
    private static let storedAt = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    /// An entry fresh for 10 s from `storedAt`, with `cacheControl` as its directives.
    private static func entry(_ cacheControl: String = "max-age=10") -> CachedResponse {
        let metadata = CachedResponse.Metadata(storedAt: storedAt, initialAge: 0, freshnessLifetime: 10)
        return CachedResponse(
            status: .ok,
            headers: ["Cache-Control": cacheControl],
            body: ByteBuffer(string: "{}"),
            metadata: metadata
        )
    }

    /// The step's name, for comparing.
    private static func name(_ step: ClientCacheDirectives.Step) -> String {
        switch step {
        case .hit: "hit"
        case .staleWhileRefreshing: "stale, refreshing"
        case .stale: "stale"
        case .fetch(let entry): entry == nil ? "fetch" : "fetch, revalidating"
        case .notCached: "not cached"
        }
    }

    private static func step(
        _ request: String?,
        _ found: ResponseCache.Lookup,
        honorsNoCache: Bool = false,
        secondsStale: Int64 = 5
    ) -> String {
        let headers: HTTPHeaders = request.map { ["Cache-Control": $0] } ?? [:]
        let now = storedAt + .seconds(10 + secondsStale)
        return name(ClientCacheDirectives(headers: headers).step(found: found, honorsNoCache: honorsNoCache, at: now))
    }

    @Test("RFC 9111 §5.2.1.7: only-if-cached is answered from the cache or not at all")
    func onlyIfCached() {
        #expect(Self.step("only-if-cached", .miss) == "not cached")
        #expect(Self.step("only-if-cached", .fresh(Self.entry())) == "hit")
        #expect(Self.step("only-if-cached", .stale(Self.entry())) == "not cached")
        #expect(Self.step("only-if-cached, max-stale=60", .stale(Self.entry())) == "stale")
        #expect(Self.step("only-if-cached, max-stale", .stale(Self.entry())) == "stale")
        #expect(Self.step("only-if-cached, max-stale=4", .stale(Self.entry())) == "not cached")
        let swr = Self.entry("max-age=10, stale-while-revalidate=60")
        #expect(Self.step("only-if-cached", .stale(swr)) == "not cached", "no background refresh either")
        for forbidding in ["max-age=10, must-revalidate", "s-maxage=10", "max-age=10, proxy-revalidate"] {
            #expect(Self.step("only-if-cached, max-stale", .stale(Self.entry(forbidding))) == "not cached")
        }
        #expect(Self.step("only-if-cached, no-cache", .fresh(Self.entry()), honorsNoCache: true) == "hit")
    }

    @Test("no-cache and max-age=0 revalidate a fresh entry only with cache.honorClientNoCache")
    func clientNoCache() {
        for request in ["no-cache", "max-age=0"] {
            #expect(Self.step(request, .fresh(Self.entry())) == "hit")
            #expect(Self.step(request, .fresh(Self.entry()), honorsNoCache: true) == "fetch, revalidating")
            let swr = Self.entry("max-age=10, stale-while-revalidate=60")
            #expect(Self.step(request, .stale(swr)) == "stale, refreshing")
            #expect(Self.step(request, .stale(swr), honorsNoCache: true) == "fetch, revalidating")
        }
        #expect(Self.step("max-age=5", .fresh(Self.entry()), honorsNoCache: true) == "hit")
    }

    @Test("without directives: fresh is a hit, stale is refreshed or fetched, a miss is fetched")
    func noDirectives() {
        #expect(Self.step(nil, .fresh(Self.entry())) == "hit")
        #expect(Self.step(nil, .stale(Self.entry("max-age=10, stale-while-revalidate=60"))) == "stale, refreshing")
        #expect(Self.step(nil, .stale(Self.entry())) == "fetch, revalidating")
        #expect(Self.step(nil, .miss) == "fetch")
    }
}
