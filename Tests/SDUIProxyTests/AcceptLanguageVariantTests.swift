import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxy

/// A backend that varies on `Accept-Language`: one variant per stated preference, whatever order languages of
/// equal weight come in.
@Suite("Accept-Language variants")
struct AcceptLanguageVariantTests {
    @Test("RFC 9111 §4.1: `en, fr` and `fr, en` select one stored variant; another weighting does not")
    func orderIgnored() async throws {
        try await ProxyHarness.run(origin: { _ in
            var response = TestOrigin.Response.component(maxAge: 600)
            response.headers.append(("Vary", "Accept-Language"))
            return response
        }) { proxy in
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "en, fr")])["X-Cache"] == "MISS")
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "FR,en")])["X-Cache"] == "HIT")
            let other = try await proxy.get("/screens/home", headers: [("Accept-Language", "fr, en;q=0.5")])
            #expect(other["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.count == 2)
        }
    }
}
