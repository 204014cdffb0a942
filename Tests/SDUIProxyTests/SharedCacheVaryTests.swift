import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// How `Vary` selects a stored variant (RFC 9111 section 4.1), against a real origin over loopback.
@Suite("RFC 9111 §4.1: Vary")
struct SharedCacheVaryTests {
    @Test("Vary selects the stored variant, and variants live side by side")
    func varySelection() async throws {
        try await ProxyHarness.run(origin: { request in
            let language = request.headers.first(name: "accept-language") ?? "none"
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=60"), ("Vary", "Accept-Language"),
                ],
                body: #"{"_beagleComponent_":"a","lang":"\#(language)"}"#
            )
        }) { proxy async throws in
            let english = try await proxy.get("/v", headers: [("Accept-Language", "en")])
            let portuguese = try await proxy.get("/v", headers: [("Accept-Language", "pt")])
            let englishAgain = try await proxy.get("/v", headers: [("Accept-Language", "en")])
            let portugueseAgain = try await proxy.get("/v", headers: [("Accept-Language", "pt")])
            #expect(english.body.contains(#""lang":"en""#))
            #expect(portuguese.body.contains(#""lang":"pt""#))
            #expect(englishAgain["X-Cache"] == "HIT")
            #expect(englishAgain.body.contains(#""lang":"en""#))
            #expect(portugueseAgain["X-Cache"] == "HIT")
            #expect(portugueseAgain.body.contains(#""lang":"pt""#))
            #expect(proxy.origin.requestCount == 2)
            // Two responses were stored and go, not the list of the headers they vary on.
            let stats = try await proxy.admin("/cache/stats").body
            #expect(stats.contains(#""entries":2,"#) && stats.contains(#""stores":2,"#))
            #expect(
                try await proxy.admin("/cache?url=/v", method: .DELETE).body == #"{"purged":2,"inFlight":0,"url":"/v"}"#
            )
        }
    }

    @Test("a backend Vary on a header another route keys on still splits this route's entries")
    func varyOnAnotherRoutesKeyedHeader() async throws {
        try await ProxyHarness.run(
            origin: { request in
                let tier = request.headers.first(name: "x-tier") ?? "none"
                return TestOrigin.Response(
                    headers: [
                        ("Content-Type", "application/json"), ("Cache-Control", "max-age=60"), ("Vary", "X-Tier"),
                    ],
                    body: #"{"_beagleComponent_":"a","tier":"\#(tier)"}"#
                )
            },
            configure: {
                var tiered = $0.cache.policy
                tiered.vary = ["x-tier"]
                $0.cache.routes = [.init(prefix: "/tiered", policy: tiered)]
            }
        ) { proxy async throws in
            // /home is not under /tiered: its key leaves X-Tier out, so only the backend's Vary can tell them apart.
            let gold = try await proxy.get("/home", headers: [("X-Tier", "gold")])
            let free = try await proxy.get("/home", headers: [("X-Tier", "free")])
            #expect(gold.body.contains(#""tier":"gold""#))
            #expect(free.body.contains(#""tier":"free""#))
            #expect(free["X-Cache"] == "MISS")
            #expect(try await proxy.get("/home", headers: [("X-Tier", "gold")])["X-Cache"] == "HIT")
            // On the route that keys on it, X-Tier is in the key already.
            _ = try await proxy.get("/tiered/a", headers: [("X-Tier", "gold")])
            let tieredFree = try await proxy.get("/tiered/a", headers: [("X-Tier", "free")])
            #expect(tieredFree.body.contains(#""tier":"free""#))
            #expect(try await proxy.get("/tiered/a", headers: [("X-Tier", "free")])["X-Cache"] == "HIT")
        }
    }

    @Test(
        "RFC 9111 §4.1: values are compared normalised: whitespace around commas, case where values ignore it",
        arguments: [
            ("Accept-Language", "en-US,fr", "en-us , fr", true),
            ("Accept-Language", "en-US,fr", "EN-US,,fr", true),
            // Languages of equal weight in any order state one preference (RFC 9110 section 12.5.4).
            ("Accept-Language", "en-US,fr", "fr,en-US", true),
            ("Accept-Language", "en-US,fr;q=0.5", "fr,en-US;q=0.5", false),
            ("Accept-Language", "en;q=0.5", "en;q=0.4", false),
            ("Accept-Charset", "utf-8, iso-8859-1", "UTF-8,ISO-8859-1", true),
            ("X-Theme", "Dark", "dark", false),
            ("X-Theme", "dark, wide", "dark,wide", true),
        ]
    )
    func normalisedValues(field: String, first: String, second: String, same: Bool) async throws {
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response.component().withHeader("Vary", field)
        }) { proxy async throws in
            #expect(try await proxy.get("/a", headers: [(field, first)])["X-Cache"] == "MISS")
            let reply = try await proxy.get("/a", headers: [(field, second)])
            #expect((reply["X-Cache"] == "HIT") == same, "\(field): \(first) then \(second)")
        }
    }
}
