import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// `Cache-Status` (RFC 9211) on every response of the cache path, against a real origin over loopback.
@Suite("RFC 9211: Cache-Status")
struct CacheStatusTests {
    private static let component = #"{"_beagleComponent_":"a"}"#

    /// `value` with a positive ttl written `ttl=<left>` once it is checked to be what a 60 s lifetime leaves
    /// on a loaded machine (the exchange's own time counts in the response's age).
    private static func leftOf60(_ value: String?) -> String? {
        guard let value, let seconds = CacheStatusText.ttl(in: value) else { return value }
        #expect((45...60).contains(seconds), "\(value)")
        return CacheStatusText.withTTLLeftOut(value)
    }

    @Test("RFC 9211 §2: a miss that is stored, then a hit, then a variant not stored yet")
    func missHitVaryMiss() async throws {
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response.component().withHeader("Vary", "Accept-Language")
        }) { proxy async throws in
            let miss = try await proxy.get("/a", headers: [("Accept-Language", "en")])
            #expect(
                Self.leftOf60(miss["Cache-Status"]) == "sdui-proxy; fwd=uri-miss; fwd-status=200; ttl=<left>; stored"
            )
            let hit = try await proxy.get("/a", headers: [("Accept-Language", "en")])
            #expect(Self.leftOf60(hit["Cache-Status"]) == "sdui-proxy; hit; ttl=<left>")
            let other = try await proxy.get("/a", headers: [("Accept-Language", "fr")])
            #expect(
                Self.leftOf60(other["Cache-Status"]) == "sdui-proxy; fwd=vary-miss; fwd-status=200; ttl=<left>; stored"
            )
        }
    }

    @Test("RFC 9211 §2.2: another platform's entry stored makes a miss fwd=vary-miss; none stored, fwd=uri-miss")
    func otherPlatformIsVaryMiss() async throws {
        try await ProxyHarness.run(origin: { _ in TestOrigin.Response.component() }) { proxy async throws in
            let first = try await proxy.get("/a", headers: [("beagle-platform", "IOS")])
            #expect(
                Self.leftOf60(first["Cache-Status"]) == "sdui-proxy; fwd=uri-miss; fwd-status=200; ttl=<left>; stored"
            )
            let android = try await proxy.get("/a", headers: [("beagle-platform", "ANDROID")])
            #expect(
                Self.leftOf60(android["Cache-Status"])
                    == "sdui-proxy; fwd=vary-miss; fwd-status=200; ttl=<left>; stored"
            )
            // The default platform is a variant like any other.
            let web = try await proxy.get("/a")
            #expect(
                Self.leftOf60(web["Cache-Status"]) == "sdui-proxy; fwd=vary-miss; fwd-status=200; ttl=<left>; stored"
            )
            let elsewhere = try await proxy.get("/b", headers: [("beagle-platform", "ANDROID")])
            #expect(
                Self.leftOf60(elsewhere["Cache-Status"])
                    == "sdui-proxy; fwd=uri-miss; fwd-status=200; ttl=<left>; stored"
            )
        }
    }

    @Test("RFC 9211 §2.2: fwd=stale when a stale entry is revalidated (304) or stands in for a failure")
    func staleForwards() async throws {
        let failing = NIOLockedValueBox(false)
        try await ProxyHarness.run(origin: { request in
            if failing.withLockedValue({ $0 }) { return TestOrigin.Response(status: .serviceUnavailable, body: "down") }
            if request.headers.first(name: "if-none-match") == "\"v1\"" {
                return TestOrigin.Response(status: .notModified, headers: [("ETag", "\"v1\"")], body: "")
            }
            return TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("ETag", "\"v1\""), ("Cache-Control", "max-age=0")],
                body: Self.component
            )
        }) { proxy async throws in
            _ = try await proxy.get("/a")
            let revalidated = try await proxy.get("/a")
            #expect(revalidated["X-Cache"] == "REVALIDATED")
            // A lifetime of 0: the ttl is 0, or below once the exchange took a second.
            let refreshed = try #require(revalidated["Cache-Status"])
            #expect((CacheStatusText.ttl(in: refreshed) ?? 1) <= 0, "\(refreshed)")
            #expect(
                CacheStatusText.withTTLLeftOut(refreshed)
                    == "sdui-proxy; fwd=stale; fwd-status=304; ttl=<left>; stored",
                "\(refreshed)"
            )
            failing.withLockedValue { $0 = true }
            let stale = try await proxy.get("/a")
            #expect(stale["X-Cache"] == "STALE")
            let status = try #require(stale["Cache-Status"])
            // What the backend answered is there: the 503 the stale entry stood in for.
            #expect(
                status.hasPrefix("sdui-proxy; fwd=stale; fwd-status=503; ttl=-")
                    || status.hasPrefix("sdui-proxy; fwd=stale; fwd-status=503; ttl=0"),
                "\(status)"
            )
            #expect(status.hasSuffix("; detail=stale-if-error"), "\(status)")
            // A backend that does not answer has no status to report.
            try await proxy.origin.stop()
            let unreachable = try #require(try await proxy.get("/a")["Cache-Status"])
            #expect(unreachable.hasPrefix("sdui-proxy; fwd=stale; ttl="), "\(unreachable)")
            #expect(!unreachable.contains("fwd-status"))
            try await proxy.origin.restart()
        }
    }

    @Test("RFC 9211 §2.1: a stale-while-revalidate answer is a hit with a negative ttl")
    func staleWhileRevalidate() async throws {
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Age", "5"),
                    ("Cache-Control", "max-age=1, stale-while-revalidate=60"),
                ],
                body: Self.component
            )
        }) { proxy async throws in
            _ = try await proxy.get("/a")
            let stale = try await proxy.get("/a")
            #expect(stale["X-Cache"] == "STALE")
            let status = try #require(stale["Cache-Status"])
            #expect(status.hasPrefix("sdui-proxy; hit; ttl=-"), "\(status)")
        }
    }

    @Test("RFC 9211 §2.2: an answer not stored, a request with Authorization, an error, a bypass route")
    func forwardsWithoutStoring() async throws {
        try await ProxyHarness.run(
            origin: { request in
                switch request.uri {
                case "/private": TestOrigin.Response.component().withHeader("Cache-Control", "private")
                case "/down": TestOrigin.Response(status: .badGateway, body: "down")
                default: TestOrigin.Response.component()
                }
            },
            configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) }
        ) { proxy async throws in
            #expect(try await proxy.get("/private")["Cache-Status"] == "sdui-proxy; fwd=uri-miss; fwd-status=200")
            let authorized = try await proxy.get("/a", headers: [("Authorization", "Bearer x")])
            #expect(authorized["Cache-Status"] == "sdui-proxy; fwd=request; fwd-status=200")
            #expect(try await proxy.get("/down")["Cache-Status"] == "sdui-proxy; fwd=uri-miss; fwd-status=502")
            #expect(try await proxy.get("/live/x")["Cache-Status"] == "sdui-proxy; fwd=bypass; fwd-status=200")
            #expect(try await proxy.get("/a", method: .POST, body: "{}")["Cache-Status"] == nil)
        }
        try await ProxyHarness.run(origin: { _ in .component() }) { proxy async throws in
            try await proxy.origin.stop()
            let unreachable = try await proxy.get("/a")
            #expect(unreachable["Cache-Status"] == "sdui-proxy; fwd=uri-miss; detail=network")
            try await proxy.origin.restart()
        }
    }

    @Test("RFC 9211 §2.6: a request that waited for another's exchange says collapsed")
    func collapsed() async throws {
        let gate = OriginGate()
        try await ProxyHarness.run(origin: { _ in .component(heldBy: gate) }) { proxy async throws in
            async let first = proxy.get("/a")
            try await waitUntil { proxy.origin.requestCount == 1 }
            async let second = proxy.get("/a")
            try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""coalescedWaits":1"#) }
            gate.open()
            let statuses = try await [first, second].compactMap { Self.leftOf60($0["Cache-Status"]) }
            #expect(
                statuses.sorted() == [
                    "sdui-proxy; fwd=uri-miss; fwd-status=200; ttl=<left>; stored",
                    "sdui-proxy; fwd=uri-miss; fwd-status=200; ttl=<left>; stored; collapsed",
                ]
            )
        }
    }

    @Test("cache.name names the cache, cache.cacheStatusKey adds the key, cache.xCacheHeader: false drops X-Cache")
    func configured() async throws {
        try await ProxyHarness.run(
            origin: { _ in .component() },
            configure: {
                $0.cache.name = "edge-1"
                $0.cache.cacheStatusKey = true
                $0.cache.xCacheHeader = false
            }
        ) { proxy async throws in
            let miss = try await proxy.get("/a?b=1", headers: [("beagle-platform", "IOS")])
            #expect(miss["X-Cache"] == nil)
            #expect(
                Self.leftOf60(miss["Cache-Status"])
                    == #"edge-1; fwd=uri-miss; fwd-status=200; ttl=<left>; stored; key="/a?b=1 [IOS]""#
            )
            let hit = try await proxy.get("/a?b=1", headers: [("beagle-platform", "IOS")])
            #expect(hit["X-Cache"] == nil)
            #expect(hit["Cache-Status"]?.hasPrefix("edge-1; hit; ttl=") == true)
        }
    }

    @Test("RFC 9211: only-if-cached without a stored answer says so")
    func onlyIfCached() async throws {
        try await ProxyHarness.run(origin: { _ in .component() }) { proxy async throws in
            let reply = try await proxy.get("/a", headers: [("Cache-Control", "only-if-cached")])
            #expect(reply["Cache-Status"] == "sdui-proxy; detail=only-if-cached")
        }
    }
}
