import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// `Via` on the responses the proxy forwards (RFC 9110 section 7.6.3): this hop after the backend's own, once,
/// whether the response was stored, revalidated, streamed or passed through; never on the proxy's own answers.
@Suite("Via on responses")
struct ViaTests {
    @Test("the line written from bytes is the member every other path sends")
    func ownLine() {
        #expect(CachedResponse.ownViaLine.description == "Via: \(CachedResponse.ownVia)\r\n")
    }

    @Test("a miss, its hits and its revalidations carry the backend's Via then this hop's, once")
    func storedResponses() async throws {
        try await ProxyHarness.run(origin: { request in
            if request.headers.first(name: "if-none-match") == #""v1""# {
                return TestOrigin.Response(
                    status: .notModified,
                    headers: [("ETag", #""v1""#), ("Cache-Control", "max-age=0"), ("Via", "1.1 gateway")],
                    body: ""
                )
            }
            var response = TestOrigin.Response.component(maxAge: nil)
            response.headers += [("ETag", #""v1""#), ("Cache-Control", "max-age=0"), ("Via", "1.0 backend")]
            return response
        }) { proxy in
            let miss = try await proxy.get("/screens/home")
            #expect(miss.headers["Via"] == ["1.0 backend", "1.1 sdui-proxy"])
            // Stale at once: each request revalidates (a 304), and the refreshed entry keeps one hop of its own.
            for _ in 0..<3 {
                let revalidated = try await proxy.get("/screens/home")
                #expect(revalidated.status == .ok)
                #expect(revalidated.headers["Via"] == ["1.1 gateway", "1.1 sdui-proxy"], "\(revalidated.headers)")
            }
            #expect(proxy.origin.requests.count == 4)
        }
    }

    @Test("a pass-through and a response not stored carry this hop; the proxy's own errors do not")
    func forwardedAndOwnResponses() async throws {
        try await ProxyHarness.run(
            origin: { request in
                var response = TestOrigin.Response.component(maxAge: request.uri.hasPrefix("/nostore") ? nil : 60)
                if request.uri.hasPrefix("/nostore") { response.headers.append(("Cache-Control", "no-store")) }
                return response
            },
            configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) }
        ) { proxy in
            #expect(try await proxy.get("/live/feed").headers["Via"] == ["1.1 sdui-proxy"])
            let notStored = try await proxy.get("/nostore")
            #expect(notStored.headers["Via"] == ["1.1 sdui-proxy"], "\(notStored.headers)")
            let refused = try await proxy.get("/screens/home", headers: [("beagle-platform", "not a platform")])
            #expect(refused.status == .badRequest)
            #expect(refused.headers["Via"].isEmpty)
        }
    }
}
