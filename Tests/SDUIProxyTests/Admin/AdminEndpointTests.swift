import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Admin endpoints: purges by whole segments, url= with a query, and 405 with Allow")
struct AdminEndpointTests {
    @Test("a prefix purge removes whole path segments, not every string that starts the same way")
    func prefixBySegments() async throws {
        try await ProxyHarness.run { proxy async throws in
            for path in ["/screens/c", "/screens/c/1", "/screens/c?tab=2", "/screens/cc/a", "/screens/c-export"] {
                #expect(try await proxy.get(path)["X-Cache"] == "MISS")
            }
            let purge = try await proxy.admin("/cache?prefix=/screens/c", method: .DELETE)
            #expect(purge.body == #"{"purged":3,"prefix":"/screens/c"}"#)
            for path in ["/screens/c", "/screens/c/1", "/screens/c?tab=2"] {
                #expect(try await proxy.get(path)["X-Cache"] == "MISS", "\(path)")
            }
            for path in ["/screens/cc/a", "/screens/c-export"] {
                #expect(try await proxy.get(path)["X-Cache"] == "HIT", "\(path)")
            }
        }
    }

    @Test("url= takes the rest of the query: a target with a query of its own needs no encoding")
    func urlWithQuery() async throws {
        try await ProxyHarness.run { proxy async throws in
            for path in ["/search?q=a+b&page=2", "/search?q=a+b", "/search"] { _ = try await proxy.get(path) }
            let raw = try await proxy.admin("/cache?url=/search?q=a+b&page=2", method: .DELETE)
            #expect(raw.body == #"{"purged":1,"url":"/search?q=a+b&page=2"}"#)
            let encoded = try await proxy.admin("/cache?url=%2Fsearch%3Fq%3Da%2Bb", method: .DELETE)
            #expect(encoded.body == #"{"purged":1,"url":"/search?q=a+b"}"#)
            #expect(try await proxy.get("/search")["X-Cache"] == "HIT")
            #expect(try await proxy.get("/search?q=a+b&page=2")["X-Cache"] == "MISS")
            // Written as it is, a target's own escapes keep their meaning, as in a request.
            _ = try await proxy.get("/search?q=a%20b")
            let escaped = try await proxy.admin("/cache?url=/search?q=a%20b", method: .DELETE)
            #expect(escaped.body == #"{"purged":1,"url":"/search?q=a%20b"}"#)
            #expect(try await proxy.admin("/cache?url=search", method: .DELETE).status == .badRequest)
        }
    }

    @Test("a 405 says which methods the endpoint takes in Allow")
    func methodNotAllowedHasAllow() async throws {
        try await ProxyHarness.run { proxy async throws in
            let health = try await proxy.admin("/health", method: .POST)
            #expect(health.status == .methodNotAllowed)
            #expect(health["Allow"] == "GET, HEAD")
            #expect(health.body.contains(#""kind":"methodNotAllowed""#))
            let cache = try await proxy.admin("/cache", method: .GET)
            #expect(cache.status == .methodNotAllowed)
            #expect(cache["Allow"] == "DELETE")
        }
    }

    @Test("a prefetch the backend answers with an error status says the status, not a network failure")
    func prefetchBackendStatus() async throws {
        try await ProxyHarness.run(origin: { _ in TestOrigin.Response(status: .notFound, body: "no") }) {
            proxy async throws in
            let reply = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/screens/gone"],"platforms":["IOS"]}"#
            )
            #expect(
                reply.body
                    == #"{"results":[{"url":"/screens/gone","platform":"IOS","status":"failed","bytes":0,"error":"the backend answered 404 Not Found"}]}"#
            )
        }
    }
}
