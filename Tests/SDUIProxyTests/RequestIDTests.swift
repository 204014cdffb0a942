import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxy

/// `X-Request-Id`: the client's own when it is a sane token, else one the proxy makes when the backend is asked;
/// sent upstream and returned to the client. A hit makes none: it returns the client's own, if it sent one.
@Suite("request ids")
struct RequestIDTests {
    static func isMade(_ id: String?) -> Bool {
        guard let id else { return false }
        return id.utf8.count == 32 && id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    @Test("a miss sends the backend an id and returns it; a hit returns only the client's own")
    func cachePath() async throws {
        try await ProxyHarness.run { proxy in
            let miss = try await proxy.get("/screens/home")
            let sent = proxy.origin.requests.last?.headers.first(name: "x-request-id")
            #expect(Self.isMade(sent))
            #expect(miss["X-Request-Id"] == sent)

            let hit = try await proxy.get("/screens/home")
            #expect(hit["X-Cache"] == "HIT")
            #expect(hit["X-Request-Id"] == nil)
            let named = try await proxy.get("/screens/home", headers: [("X-Request-Id", "client-7.a")])
            #expect(named["X-Cache"] == "HIT")
            #expect(named["X-Request-Id"] == "client-7.a")

            let own = try await proxy.get("/screens/other", headers: [("X-Request-Id", "client-8")])
            #expect(proxy.origin.requests.last?.headers["x-request-id"] == ["client-8"])
            #expect(own["X-Request-Id"] == "client-8")
            // An id that is not a sane token is replaced, upstream and in the answer.
            let odd = try await proxy.get("/screens/third", headers: [("X-Request-Id", "not a token")])
            let replaced = proxy.origin.requests.last?.headers["x-request-id"] ?? []
            #expect(replaced.count == 1 && Self.isMade(replaced.first))
            #expect(odd["X-Request-Id"] == replaced.first)
        }
    }

    @Test("a pass-through sends the backend an id and returns it")
    func passThrough() async throws {
        try await ProxyHarness.run(configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) }) { proxy in
            let reply = try await proxy.get("/live/feed")
            let sent = proxy.origin.requests.last?.headers.first(name: "x-request-id")
            #expect(Self.isMade(sent))
            #expect(reply["X-Request-Id"] == sent)
            let named = try await proxy.get("/live/feed", headers: [("X-Request-Id", "client-9")])
            #expect(proxy.origin.requests.last?.headers.first(name: "x-request-id") == "client-9")
            #expect(named["X-Request-Id"] == "client-9")
            // The client's id is replaced when it is no sane token: one id goes upstream, not two.
            let odd = try await proxy.get("/live/feed", headers: [("X-Request-Id", "not a token")])
            let replaced = proxy.origin.requests.last?.headers["x-request-id"] ?? []
            #expect(replaced.count == 1 && Self.isMade(replaced.first))
            #expect(odd["X-Request-Id"] == replaced.first)
        }
    }

    @Test("an X-Request-Id among the configured headers is replaced by the request's own, on either path")
    func configuredIDReplaced() async throws {
        try await ProxyHarness.run(configure: {
            ProxyHarness.bypassingCache(under: "/live", in: &$0)
            $0.headers.append((name: "X-Request-Id", value: "configured"))
        }) { proxy in
            for path in ["/live/feed", "/screens/home"] {
                let reply = try await proxy.get(path)
                let sent = proxy.origin.requests.last?.headers["x-request-id"] ?? []
                #expect(sent.count == 1 && Self.isMade(sent.first), "\(path)")
                #expect(reply["X-Request-Id"] == sent.first)
            }
        }
    }

    @Test("a pass-through's answer carries the request's id once, in place of the backend's own")
    func backendIDReplaced() async throws {
        try await ProxyHarness.run(
            origin: { _ in TestOrigin.Response.component().withHeader("X-Request-Id", "backend-7") },
            configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) }
        ) { proxy in
            let reply = try await proxy.get("/live/feed", headers: [("X-Request-Id", "client-9")])
            #expect(reply.headers["X-Request-Id"] == ["client-9"])
        }
    }
}
