import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// What clients see of an answer's `Vary` and purge tags, against a real origin over loopback: every answer the
/// cache keys on request fields names them in `Vary`, and the tag field stays the operator's.
@Suite("Vary names the key's request fields; purge tags stay out of answers")
struct VaryAndTagFieldsTests {
    /// The origin of these tests: `/merged` varies on the platform and an encoding itself, `/private` may not be
    /// stored, `/reval` is stale at once and answers its ETag with a 304 that carries no tags; every 200 is
    /// tagged.
    private static func origin(_ request: TestOrigin.Request) -> TestOrigin.Response {
        if request.uri == "/reval" {
            if request.headers.first(name: "if-none-match") == #""r1""# {
                return TestOrigin.Response(status: .notModified, headers: [("ETag", #""r1""#)], body: "")
            }
            return TestOrigin.Response.component(maxAge: 0).withHeader("ETag", #""r1""#)
                .withHeader("Surrogate-Key", "reval")
        }
        var response = TestOrigin.Response.component().withHeader("Surrogate-Key", "screens all")
        if request.uri == "/merged" { response = response.withHeader("Vary", "Accept-Encoding, Beagle-Platform") }
        if request.uri == "/private" { response.headers = [("Cache-Control", "no-store")] }
        return response
    }

    /// JSON answers may be kept compressed (the default `compression`), so their Vary names Accept-Encoding too.
    @Test("misses, hits, HEADs and 304s name the platform in Vary, even when it came from the default")
    func platformInVary() async throws {
        try await ProxyHarness.run(origin: Self.origin) { proxy async throws in
            let miss = try await proxy.get("/a")
            #expect(miss["X-Cache"] == "MISS")
            #expect(miss.headers["vary"] == ["beagle-platform, Accept-Encoding"])
            let hit = try await proxy.get("/a", headers: [("beagle-platform", "WEB")])
            #expect(hit["X-Cache"] == "HIT")
            #expect(hit.headers["vary"] == ["beagle-platform, Accept-Encoding"])
            let head = try await proxy.get("/a", method: .HEAD)
            #expect(head.headers["vary"] == ["beagle-platform, Accept-Encoding"])
            let etag = try #require(hit["ETag"])
            let notModified = try await proxy.get("/a", headers: [("If-None-Match", etag)])
            #expect(notModified.status == .notModified)
            #expect(notModified.headers["vary"] == ["beagle-platform, Accept-Encoding"])
            // The answers of another platform say so alike.
            let ios = try await proxy.get("/a", headers: [("beagle-platform", "IOS")])
            #expect(ios["Cache-Status"]?.contains("fwd=vary-miss") == true)
            #expect(ios.headers["vary"] == ["beagle-platform, Accept-Encoding"])
            // An answer that is not stored is still one platform's.
            let unstored = try await proxy.get("/private")
            #expect(unstored["X-Cache"] == "BYPASS")
            #expect(unstored.headers["vary"] == ["beagle-platform"])
        }
    }

    @Test("the backend's Vary is merged with the key's fields, each named once whatever its case")
    func mergedWithBackend() async throws {
        try await ProxyHarness.run(
            origin: Self.origin,
            configure: { configuration in
                var policy = configuration.cache.policy
                policy.vary = ["accept-language"]
                configuration.cache.routes.append(.init(prefix: "/lang/", policy: policy))
            }
        ) { proxy async throws in
            for _ in 0..<2 {
                let merged = try await proxy.get("/merged", headers: [("beagle-platform", "IOS")])
                #expect(merged.headers["vary"] == ["Accept-Encoding, Beagle-Platform"])
            }
            for _ in 0..<2 {
                let route = try await proxy.get("/lang/home", headers: [("Accept-Language", "fr")])
                #expect(route.headers["vary"] == ["beagle-platform, accept-language, Accept-Encoding"])
            }
            #expect(try await proxy.get("/lang/home", headers: [("Accept-Language", "fr")])["X-Cache"] == "HIT")
        }
    }

    @Test("the tag field is left out of misses, hits and bypassed GETs, and the tags still purge")
    func tagsHidden() async throws {
        try await ProxyHarness.run(
            origin: Self.origin,
            configure: { ProxyHarness.bypassingCache(under: "/pass/", in: &$0) }
        ) { proxy async throws in
            let miss = try await proxy.get("/a")
            #expect(miss["X-Cache"] == "MISS" && miss["Surrogate-Key"] == nil)
            let hit = try await proxy.get("/a")
            #expect(hit["X-Cache"] == "HIT" && hit["Surrogate-Key"] == nil)
            let bypassed = try await proxy.get("/pass/a")
            #expect(bypassed["X-Cache"] == "BYPASS" && bypassed["Surrogate-Key"] == nil)
            #expect(bypassed.body.contains("_beagleComponent_"))

            let purged = try await proxy.admin("/cache?tag=screens", method: .DELETE)
            #expect(purged.body.contains(#""purged":1"#), "\(purged.body)")
            #expect(try await proxy.get("/a")["X-Cache"] == "MISS")

            // A 304 without tags keeps the entry's own: the refreshed entry is still purged by them.
            #expect(try await proxy.get("/reval")["X-Cache"] == "MISS")
            let revalidated = try await proxy.get("/reval")
            #expect(revalidated["X-Cache"] == "REVALIDATED" && revalidated["Surrogate-Key"] == nil)
            let byTag = try await proxy.admin("/cache?tag=reval", method: .DELETE)
            #expect(byTag.body.contains(#""purged":1"#), "\(byTag.body)")
        }
    }

    @Test("cache.exposeTags keeps the tag field in what clients see")
    func tagsExposed() async throws {
        try await ProxyHarness.run(
            origin: Self.origin,
            configure: { $0.cache.exposeTags = true }
        ) { proxy async throws in
            #expect(try await proxy.get("/a")["Surrogate-Key"] == "screens all")
            let hit = try await proxy.get("/a")
            #expect(hit["X-Cache"] == "HIT" && hit["Surrogate-Key"] == "screens all")
        }
    }
}
