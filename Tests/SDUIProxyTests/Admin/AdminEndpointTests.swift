import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Admin endpoints: purges by whole segments, url= with a query, soft purges, and 405 with Allow")
struct AdminEndpointTests {
    @Test("a prefix purge removes whole path segments, not every string that starts the same way")
    func prefixBySegments() async throws {
        try await ProxyHarness.run { proxy async throws in
            for path in ["/screens/c", "/screens/c/1", "/screens/c?tab=2", "/screens/cc/a", "/screens/c-export"] {
                #expect(try await proxy.get(path)["X-Cache"] == "MISS")
            }
            let purge = try await proxy.admin("/cache?prefix=/screens/c", method: .DELETE)
            #expect(purge.body == #"{"purged":3,"inFlight":0,"prefix":"/screens/c"}"#)
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
            #expect(raw.body == #"{"purged":1,"inFlight":0,"url":"/search?q=a+b&page=2"}"#)
            let encoded = try await proxy.admin("/cache?url=%2Fsearch%3Fq%3Da%2Bb", method: .DELETE)
            #expect(encoded.body == #"{"purged":1,"inFlight":0,"url":"/search?q=a+b"}"#)
            #expect(try await proxy.get("/search")["X-Cache"] == "HIT")
            #expect(try await proxy.get("/search?q=a+b&page=2")["X-Cache"] == "MISS")
            // Written as it is, a target's own escapes keep their meaning, as in a request.
            _ = try await proxy.get("/search?q=a%20b")
            let escaped = try await proxy.admin("/cache?url=/search?q=a%20b", method: .DELETE)
            #expect(escaped.body == #"{"purged":1,"inFlight":0,"url":"/search?q=a%20b"}"#)
            #expect(try await proxy.admin("/cache?url=search", method: .DELETE).status == .badRequest)
        }
    }

    static let purgeQueries: [(query: String?, expected: CacheInvalidation?)] = [
        (nil, CacheInvalidation(.all)),
        ("", CacheInvalidation(.all)),
        ("soft=true", CacheInvalidation(.all, soft: true)),
        ("soft=false", CacheInvalidation(.all)),
        ("url=/a", CacheInvalidation(.targets(["/a"]))),
        ("url=/a&soft=true", CacheInvalidation(.targets(["/a"]), soft: true)),
        ("url=/a&soft=false", CacheInvalidation(.targets(["/a"]))),
        ("soft=true&url=/a", CacheInvalidation(.targets(["/a"]), soft: true)),
        ("soft=false&url=/a", CacheInvalidation(.targets(["/a"]))),
        ("url=/search?q=a&page=2&soft=true", CacheInvalidation(.targets(["/search?q=a&page=2"]), soft: true)),
        ("soft=true&url=/search?q=a&page=2", CacheInvalidation(.targets(["/search?q=a&page=2"]), soft: true)),
        // A target whose own query ends in &soft= is encoded whole; one whose only parameter is soft needs not be.
        ("url=%2Fx%3Fa%3D1%26soft%3Dtrue", CacheInvalidation(.targets(["/x?a=1&soft=true"]))),
        ("url=%2Fx%3Fa%3D1%26soft%3Dtrue&soft=true", CacheInvalidation(.targets(["/x?a=1&soft=true"]), soft: true)),
        ("url=/x?soft=true", CacheInvalidation(.targets(["/x?soft=true"]))),
        ("prefix=/screens&soft=true", CacheInvalidation(.prefix("/screens"), soft: true)),
        ("soft=true&prefix=/screens/", CacheInvalidation(.prefix("/screens/"), soft: true)),
        ("prefix=/screens/c?", CacheInvalidation(.prefix("/screens/c?"))),
        ("tag=promo&soft=true", CacheInvalidation(.tag("promo"), soft: true)),
        ("tag=promo", CacheInvalidation(.tag("promo"))),
        // Refused: bad flags, a flag given twice, a scope that is not one, or more than one.
        ("soft=yes", nil),
        ("soft=", nil),
        ("soft", nil),
        ("soft=TRUE", nil),
        ("tag=promo&soft=1", nil),
        ("url=/a&soft=yes", nil),
        ("url=/a&soft=", nil),
        ("soft=yes&url=/a", nil),
        ("soft=true&url=/a&soft=true", nil),
        ("soft=true&url=a", nil),
        ("tag=x&url=/a", nil),
        ("soft=true&tag=x&url=/a", nil),
        ("prefix=/a&tag=x", nil),
        ("prefix=a&soft=true", nil),
        ("tag=&soft=true", nil),
        ("other=1", nil),
    ]

    @Test("the purge query reads into one invalidation, or a 400", arguments: purgeQueries)
    func purgeQuery(query: String?, expected: CacheInvalidation?) {
        let read = Result { () throws(ProxyError) in try PurgeRequest.invalidation(rawQuery: query) }
        switch (read, expected) {
        case (.success(let invalidation), let expected?):
            #expect(invalidation == expected, "\(query ?? "no query")")
        case (.failure(let error), nil):
            #expect(error.status == .badRequest, "\(query ?? "no query")")
        default:
            Issue.record("\(query ?? "no query"): read \(read), expected \(expected.map(\.description) ?? "a 400")")
        }
    }

    @Test("a bad soft= says what it takes, and after url= how to purge a target whose query ends in soft")
    func purgeQueryErrors() {
        #expect(throws: ProxyError(.badRequest, "soft must be true or false")) {
            try PurgeRequest.invalidation(rawQuery: "prefix=/a&soft=yes")
        }
        #expect(
            throws: ProxyError(
                .badRequest,
                "soft must be true or false (a target whose own query ends in a soft parameter is encoded whole)"
            )
        ) {
            try PurgeRequest.invalidation(rawQuery: "url=/x?a=1&soft=1")
        }
    }

    @Test("soft=true in every form of the purge marks stale instead of removing, and says so")
    func softPurgeForms() async throws {
        try await ProxyHarness.run(origin: { request in
            TestOrigin.Response.component(maxAge: 300).withHeader(
                "Surrogate-Key",
                request.uri.hasPrefix("/t") ? "t" : "o"
            )
        }) { proxy async throws in
            let paths = ["/u?x=1", "/p/1", "/t", "/o"]
            for path in paths { #expect(try await proxy.get(path)["X-Cache"] == "MISS") }
            let purges: [(String, String, [String])] = [
                ("soft=true&url=/u?x=1", #"{"purged":1,"inFlight":0,"url":"/u?x=1","soft":true}"#, ["/u?x=1"]),
                ("prefix=/p&soft=true", #"{"purged":1,"inFlight":0,"prefix":"/p","soft":true}"#, ["/p/1"]),
                ("tag=t&soft=true", #"{"purged":1,"inFlight":0,"tag":"t","soft":true}"#, ["/t"]),
                ("soft=true", #"{"purged":4,"inFlight":0,"all":true,"soft":true}"#, paths),
            ]
            for (query, answer, reached) in purges {
                let purge = try await proxy.admin("/cache?" + query, method: .DELETE)
                #expect(purge.status == .ok)
                #expect(purge.body == answer)
                // Stale, not gone: each is fetched again (no validators, no stale-while-revalidate) and stored.
                for path in reached {
                    let before = proxy.origin.requests(to: path).count
                    #expect(try await proxy.get(path)["X-Cache"] == "MISS", "\(path)")
                    #expect(proxy.origin.requests(to: path).count == before + 1)
                    #expect(try await proxy.get(path)["X-Cache"] == "HIT", "\(path)")
                }
            }
            let stats = try await proxy.admin("/cache/stats").body
            #expect(stats.contains(#""entries":4,"#))
            #expect(stats.contains(#""purged":0,"softPurged":7,"#))
            let refused = try await proxy.admin("/cache?url=/o&soft=yes", method: .DELETE)
            #expect(refused.status == .badRequest)
            #expect(refused.body.contains("encoded whole"))
            #expect(try await proxy.get("/o")["X-Cache"] == "HIT")
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
