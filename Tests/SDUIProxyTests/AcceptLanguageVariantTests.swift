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

    /// An origin that has its screens in German only: whatever a client asks for, it answers in `language`,
    /// saying so, with a body that names the request it answered.
    private static func germanOnly(vary: Bool, language: String = "de") -> TestOrigin.Responder {
        { request in
            let asked = request.headers.first(name: "accept-language") ?? "-"
            var response = TestOrigin.Response.component("de:screen", maxAge: 600, extra: #","asked":"\#(asked)""#)
            response.headers.append(("Content-Language", language))
            if vary { response.headers.append(("Vary", "Accept-Language")) }
            return response
        }
    }

    @Test("RFC 9110 §12.5.4: a variant in German, stored for `en, de`, answers `fr;q=0.5, de;q=1.0` from the cache")
    func contentLanguageAnswers() async throws {
        try await ProxyHarness.run(origin: Self.germanOnly(vary: true)) { proxy in
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "en, de")])["X-Cache"] == "MISS")
            let german = try await proxy.get("/screens/home", headers: [("Accept-Language", "fr;q=0.5, de;q=1.0")])
            #expect(german["X-Cache"] == "HIT")
            #expect(german["Content-Language"] == "de")
            #expect(german.body.contains("de:screen"))
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "DE")])["X-Cache"] == "HIT")
            #expect(proxy.origin.requests.count == 1)
            // Matched whole: a preference for `de-AT` is not met by `de`.
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "de-AT")])["X-Cache"] == "MISS")
            // Preferring French most, the client may get French from the backend: it is asked.
            let french = try await proxy.get("/screens/home", headers: [("Accept-Language", "fr, de;q=0.9")])
            #expect(french["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.count == 3)
            let stats = try await proxy.admin("/cache/stats").body
            #expect(stats.contains(#""hits":2"#), "\(stats)")
        }
    }

    @Test("a filing never replaces what the backend chose for the request it files under, nor a refused language")
    func filingKeepsTheBackendsChoice() async throws {
        try await ProxyHarness.run(origin: Self.germanOnly(vary: true, language: "de-CH")) { proxy in
            // The backend's own answer to `de-ch`, then one in the same language to a request preferring English.
            let own = try await proxy.get("/screens/home", headers: [("Accept-Language", "de-ch")])
            #expect(own.body.contains(#""asked":"de-ch""#))
            let english = try await proxy.get("/screens/home", headers: [("Accept-Language", "en, de-ch;q=0.5")])
            #expect(english["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.count == 2)
            let again = try await proxy.get("/screens/home", headers: [("Accept-Language", "de-CH")])
            #expect(again["X-Cache"] == "HIT")
            #expect(again.body.contains(#""asked":"de-ch""#))
            // `de-CH` answers no preference for `de`, least of all one that refuses `de-CH`.
            let refused = try await proxy.get("/screens/home", headers: [("Accept-Language", "de-CH;q=0, de")])
            #expect(refused["X-Cache"] == "MISS")
        }
    }

    @Test("RFC 9110 §12.5.4: on a route whose vary names Accept-Language, the backend naming none, the same")
    func routeVary() async throws {
        try await ProxyHarness.run(
            origin: Self.germanOnly(vary: false),
            configure: { $0.cache.policy.vary = ["accept-language"] }
        ) { proxy in
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "en, de")])["X-Cache"] == "MISS")
            let german = try await proxy.get("/screens/home", headers: [("Accept-Language", "fr;q=0.5, de")])
            #expect(german["X-Cache"] == "HIT")
            #expect(try await proxy.get("/screens/home", headers: [("Accept-Language", "fr")])["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.count == 2)
        }
    }
}
