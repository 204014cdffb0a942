import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxy

/// RFC 9110 §9.3.3: an answer to a `POST` with explicit freshness and a `Content-Location` equal to its target
/// may answer later `GET`s and `HEAD`s of that target. The `POST` itself is forwarded every time.
@Suite("POST answers reused for GET")
struct PostAnswerForGetTests {
    /// An origin that answers a POST with `postHeaders` and a component, and a GET with another component.
    private static func origin(_ postHeaders: [(String, String)]) -> TestOrigin.Responder {
        { request in
            guard request.method == .POST else { return .component("from:get") }
            var response = TestOrigin.Response(body: #"{"_beagleComponent_":"from:post","id":"cart"}"#)
            response.headers += postHeaders
            return response
        }
    }

    private static let ownLocation = [("Cache-Control", "max-age=60"), ("Content-Location", "/screens/cart")]

    @Test("RFC 9110 §9.3.3: a fresh POST answer naming its own target answers the next GET and HEAD from the cache")
    func reused() async throws {
        try await ProxyHarness.run(origin: Self.origin(Self.ownLocation)) { proxy in
            let post = try await proxy.get("/screens/cart", method: .POST, body: #"{"add":"sku-1"}"#)
            #expect(post.status == .ok)
            #expect(post.body.contains("from:post"))
            // Stored once the POST's answer has ended, after the client has it.
            try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""entries":1"#) }

            let get = try await proxy.get("/screens/cart")
            #expect(get["X-Cache"] == "HIT")
            #expect(get.body == post.body)
            #expect(get["Content-Location"] == "/screens/cart")
            let head = try await proxy.get("/screens/cart", method: .HEAD)
            #expect(head["X-Cache"] == "HIT")
            #expect(head.body.isEmpty)
            #expect(proxy.origin.requests.map(\.method) == [.POST])

            // The POST is still forwarded every time, and its new answer replaces the stored one.
            _ = try await proxy.get("/screens/cart", method: .POST, body: #"{"add":"sku-2"}"#)
            #expect(proxy.origin.requests.map(\.method) == [.POST, .POST])
            try await waitUntil { try await proxy.get("/screens/cart")["X-Cache"] == "HIT" }
        }
    }

    @Test("RFC 9110 §9.3.3: the stored answer is the platform's that posted; another platform's GET asks the backend")
    func keyedByPlatform() async throws {
        try await ProxyHarness.run(origin: Self.origin(Self.ownLocation)) { proxy in
            _ = try await proxy.get("/screens/cart", headers: [("beagle-platform", "IOS")], method: .POST, body: "{}")
            try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""entries":1"#) }
            #expect(try await proxy.get("/screens/cart", headers: [("beagle-platform", "IOS")])["X-Cache"] == "HIT")
            let android = try await proxy.get("/screens/cart", headers: [("beagle-platform", "ANDROID")])
            #expect(android["X-Cache"] == "MISS")
            #expect(android.body.contains("from:get"))
        }
    }

    @Test(
        "RFC 9110 §9.3.3: without explicit freshness, naming another URL, setting a cookie or saying no-store, nothing is stored",
        arguments: [
            [("Content-Location", "/screens/cart")],
            [("Cache-Control", "max-age=60"), ("Content-Location", "/screens/other")],
            [("Cache-Control", "max-age=60")],
            [("Cache-Control", "max-age=60"), ("Content-Location", "/screens/cart"), ("Set-Cookie", "session=abc")],
            [("Cache-Control", "max-age=60, no-store"), ("Content-Location", "/screens/cart")],
            [("Cache-Control", "max-age=60, private"), ("Content-Location", "/screens/cart")],
        ]
    )
    func notReused(_ postHeaders: [(String, String)]) async throws {
        try await ProxyHarness.run(origin: Self.origin(postHeaders)) { proxy in
            let post = try await proxy.get("/screens/cart", method: .POST, body: "{}")
            #expect(post.body.contains("from:post"))
            let get = try await proxy.get("/screens/cart")
            #expect(get["X-Cache"] == "MISS")
            #expect(get.body.contains("from:get"))
            #expect(proxy.origin.requests.map(\.method) == [.POST, .GET])
        }
    }

    @Test("a POST answer on a route that bypasses the cache, or larger than upstream.maxResponseBytes, is not stored")
    func bypassAndSize() async throws {
        // Each POST's answer names its own target.
        let origin: TestOrigin.Responder = { request in
            guard request.method == .POST else { return .component("from:get") }
            var response = TestOrigin.Response(body: #"{"_beagleComponent_":"from:post","id":"cart"}"#)
            response.headers += [("Cache-Control", "max-age=60"), ("Content-Location", request.uri)]
            return response
        }
        try await ProxyHarness.run(
            origin: origin,
            configure: {
                ProxyHarness.bypassingCache(under: "/live", in: &$0)
                $0.upstream.maxResponseBytes = 40
            }
        ) { proxy in
            let live = try await proxy.get("/live/cart", method: .POST, body: "{}")
            #expect(live["Content-Location"] == "/live/cart")
            _ = try await proxy.get("/live/cart")
            #expect(proxy.origin.requests.map(\.method) == [.POST, .GET])
            // 44 bytes: more than a fill may hold, so its copy is dropped.
            let large = try await proxy.get("/screens/cart", method: .POST, body: "{}")
            #expect(large.body.utf8.count > 40)
            #expect(try await proxy.get("/screens/cart")["X-Cache"] != "HIT")
            #expect(proxy.origin.requests.filter { $0.uri == "/screens/cart" && $0.method == .GET }.count >= 1)
        }
    }

    @Test("the copy takes its share of what all fills may hold: a POST answer the budget cannot take is not stored")
    func fillBudget() async throws {
        try await ProxyHarness.run(
            origin: Self.origin(Self.ownLocation),
            configure: {
                // A budget smaller than the answer (the loader refuses one below maxResponseBytes; set here, it
                // stands for a budget the fills in flight have used up).
                $0.upstream.maxBufferedBytes = 20
            }
        ) { proxy in
            let post = try await proxy.get("/screens/cart", method: .POST, body: "{}")
            #expect(post.body.contains("from:post"))
            #expect(try await proxy.get("/screens/cart")["X-Cache"] != "HIT")
            #expect(proxy.origin.requests.contains { $0.method == .GET })
        }
    }
}
