import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("The cache path, end to end over loopback")
struct CachePathTests {
    @Test("a miss is fetched once, then served from memory with Age")
    func missThenHit() async throws {
        try await ProxyHarness.run { proxy async throws in
            let started = ContinuousClock.now
            let first = try await proxy.get("/screens/home")
            #expect(first.status == .ok)
            #expect(first["X-Cache"] == "MISS")
            #expect(first.body.contains("beagle:screenComponent"))
            let etag = try #require(first["ETag"])

            let second = try await proxy.get("/screens/home")
            #expect(second.status == .ok)
            #expect(second["X-Cache"] == "HIT")
            // Whole seconds since the entry was stored: no more than have passed since the first request.
            let elapsed = (ContinuousClock.now - started).components.seconds
            #expect((0...elapsed + 1).contains(Int64(second["Age"] ?? "") ?? -1))
            #expect(second["ETag"] == etag)
            #expect(second.body == first.body)
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test(
        "hits are the stored bytes, for bodies copied behind the head and for larger ones sent as they are",
        arguments: [0, 1, CachedResponse.maximumExactBodyBytes - 64, CachedResponse.maximumExactBodyBytes * 4]
    )
    func hitBodies(padding: Int) async throws {
        let body = #"{"_beagleComponent_":"a","pad":""# + String(repeating: "p", count: padding) + #""}"#
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")],
                body: body
            )
        }) { proxy async throws in
            let miss = try await proxy.get("/screens/sized")
            #expect(miss["X-Cache"] == "MISS")
            for _ in 0..<3 {
                let hit = try await proxy.get("/screens/sized")
                #expect(hit["X-Cache"] == "HIT")
                #expect(hit["Content-Length"] == String(body.utf8.count))
                #expect(hit.body == body)
            }
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("the platform header reaches the origin, and each platform has its own entry")
    func platformEntries() async throws {
        try await ProxyHarness.run(origin: { request in
            .component(extra: #","platform":"\#(request.headers.first(name: "beagle-platform") ?? "none")""#)
        }) { proxy async throws in
            let web = try await proxy.get("/screens/home")
            let ios = try await proxy.get("/screens/home", headers: [("beagle-platform", "ios")])
            let android = try await proxy.get("/screens/home", headers: [("beagle-platform", "ANDROID")])
            #expect(web.body.contains(#""platform":"WEB""#))
            #expect(ios.body.contains(#""platform":"IOS""#))
            #expect(android.body.contains(#""platform":"ANDROID""#))
            #expect([web, ios, android].allSatisfy { $0["X-Cache"] == "MISS" })

            let iosAgain = try await proxy.get("/screens/home", headers: [("beagle-platform", "IOS")])
            #expect(iosAgain["X-Cache"] == "HIT")
            #expect(iosAgain.body.contains(#""platform":"IOS""#))
            #expect(proxy.origin.requestCount == 3)
            let upstreamHeaders = proxy.origin.requests.map { $0.headers }
            #expect(upstreamHeaders.allSatisfy { $0.first(name: "content-type") == "application/json" })
            #expect(upstreamHeaders.allSatisfy { $0.first(name: "via") == "1.1 sdui-proxy" })
        }
    }

    @Test("an unknown platform is a 400 with the error body, and nothing goes upstream")
    func unknownPlatform() async throws {
        try await ProxyHarness.run { proxy async throws in
            let reply = try await proxy.get("/screens/home", headers: [("beagle-platform", "windows phone")])
            #expect(reply.status == .badRequest)
            #expect(reply.body.contains(#""kind":"badRequest""#))
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("equivalent spellings of a target share one entry")
    func normalisedTargets() async throws {
        try await ProxyHarness.run { proxy async throws in
            _ = try await proxy.get("/screens/a/../home?x=1")
            let again = try await proxy.get("/screens/%68ome?x=1")
            #expect(again["X-Cache"] == "HIT")
            #expect(proxy.origin.requests.map(\.uri) == ["/screens/home?x=1"])
        }
    }

    @Test("configured vary headers select separate entries")
    func configuredVary() async throws {
        try await ProxyHarness.run(configure: { $0.cache.policy.vary = ["accept-language"] }) { proxy async throws in
            _ = try await proxy.get("/s", headers: [("Accept-Language", "pt-BR")])
            let english = try await proxy.get("/s", headers: [("Accept-Language", "en")])
            let portuguese = try await proxy.get("/s", headers: [("Accept-Language", "pt-BR")])
            #expect(english["X-Cache"] == "MISS")
            #expect(portuguese["X-Cache"] == "HIT")
        }
    }

    @Test("HEAD on a hit answers the headers without a body")
    func headOnHit() async throws {
        try await ProxyHarness.run { proxy async throws in
            let full = try await proxy.get("/screens/home")
            let head = try await proxy.get("/screens/home", method: .HEAD)
            #expect(head.status == .ok)
            #expect(head["X-Cache"] == "HIT")
            #expect(head["Content-Length"] == String(full.body.utf8.count))
            #expect(head.body.isEmpty)
            #expect(proxy.origin.requests.map(\.method) == [.GET])
        }
    }

    @Test("HEAD on a miss fetches with GET upstream, so the answer can be stored")
    func headOnMiss() async throws {
        try await ProxyHarness.run { proxy async throws in
            let head = try await proxy.get("/screens/home", method: .HEAD)
            #expect(head["X-Cache"] == "MISS")
            #expect(head.body.isEmpty)
            let get = try await proxy.get("/screens/home")
            #expect(get["X-Cache"] == "HIT")
            #expect(proxy.origin.requests.map(\.method) == [.GET])
        }
    }

    @Test("responses without freshness information are not stored unless a default TTL is configured")
    func defaultTTL() async throws {
        try await ProxyHarness.run(origin: { _ in .component(maxAge: nil) }) { proxy async throws in
            #expect(try await proxy.get("/a")["X-Cache"] == "BYPASS")
            #expect(try await proxy.get("/a")["X-Cache"] == "BYPASS")
            #expect(proxy.origin.requestCount == 2)
        }
        try await ProxyHarness.run(
            origin: { _ in .component(maxAge: nil) },
            configure: { $0.cache.policy.defaultTTL = .seconds(30) }
        ) { proxy async throws in
            #expect(try await proxy.get("/a")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("no-store and private responses are never stored, nor Set-Cookie ones with cache.storeSetCookie: false")
    func uncacheableResponses() async throws {
        for header in [("Cache-Control", "no-store"), ("Cache-Control", "private, max-age=60"), ("Set-Cookie", "a=b")] {
            try await ProxyHarness.run(
                origin: { _ in
                    var response = TestOrigin.Response.component(maxAge: header.0 == "Set-Cookie" ? 60 : nil)
                    response.headers.append(header)
                    return response
                },
                configure: { $0.cache.storageRules.storesSetCookie = false }
            ) { proxy async throws in
                #expect(try await proxy.get("/a")["X-Cache"] == "BYPASS")
                #expect(try await proxy.get("/a")["X-Cache"] == "BYPASS")
                #expect(proxy.origin.requestCount == 2, "\(header)")
            }
        }
    }

    @Test("an invalid component is a 502 of kind decoding, and is not cached")
    func invalidComponent() async throws {
        for body in [
            #"{"notAComponent":true}"#, #"{"_beagleComponent_": "#, "[1,2]", #"{"_beagleAction_":"beagle:pushView"}"#,
        ] {
            try await ProxyHarness.run(origin: { _ in
                var response = TestOrigin.Response.component()
                response.body = body
                return response
            }) { proxy async throws in
                let first = try await proxy.get("/broken")
                #expect(first.status == .badGateway)
                #expect(first.body.contains(#""kind":"decoding""#))
                #expect(first.body.contains(#""retryable":false"#))
                #expect(first["Content-Type"] == "application/json")
                _ = try await proxy.get("/broken")
                #expect(proxy.origin.requestCount == 2, "\(body) must not be cached")
            }
        }
    }

    @Test("validation can be switched off for plain JSON APIs, and non-JSON bodies are cached as bytes")
    func validationOff() async throws {
        try await ProxyHarness.run(
            origin: { request in
                var response = TestOrigin.Response.component()
                if request.uri.hasPrefix("/img") {
                    response.headers = [("Content-Type", "image/png"), ("Cache-Control", "max-age=60")]
                    response.body = "\u{89}PNG not json"
                } else {
                    response.body = #"{"plain":"json"}"#
                }
                return response
            },
            configure: {
                $0.cache.routes = [
                    .init(
                        prefix: "/api/",
                        policy: {
                            var p = ProxyConfiguration.RoutePolicy()
                            p.validateComponents = false
                            return p
                        }()
                    )
                ]
            }
        ) { proxy async throws in
            #expect(try await proxy.get("/api/x").status == .ok)
            #expect(try await proxy.get("/api/x")["X-Cache"] == "HIT")
            #expect(try await proxy.get("/other").status == .badGateway)
            let image = try await proxy.get("/img/logo.png")
            #expect(image["Content-Type"] == "image/png")
            #expect(try await proxy.get("/img/logo.png")["X-Cache"] == "HIT")
        }
    }

    @Test("backend error statuses pass through as the backend sent them")
    func backendErrorsPassThrough() async throws {
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response(
                status: .internalServerError,
                headers: [("Content-Type", "text/plain")],
                body: "backend says no"
            )
        }) { proxy async throws in
            let reply = try await proxy.get("/screens/home")
            #expect(reply.status == .internalServerError)
            #expect(reply.body == "backend says no")
            #expect(reply["X-Cache"] == "BYPASS")
        }
    }

    @Test("an unreachable backend is a 502 of kind network whose message names no address or library type")
    func unreachableBackend() async throws {
        try await ProxyHarness.run { proxy async throws in
            try await proxy.origin.stop()
            let reply = try await proxy.get("/screens/home")
            #expect(reply.status == .badGateway)
            #expect(reply["Content-Type"] == "application/json")
            #expect(reply["Cache-Control"] == "no-store")
            #expect(
                reply.body
                    == #"{"error":{"kind":"network","message":"cannot reach the backend: connection refused","retryable":true}}"#
            )
            try await proxy.origin.restart()
        }
    }

    @Test("a backend slower than upstream.timeout is a 504 of kind timeout")
    func slowBackend() async throws {
        try await ProxyHarness.run(
            origin: { _ in
                var response = TestOrigin.Response.component()
                // Far past the timeout: a proxy loop held off its core for seconds must still find the timer first.
                response.delay = .seconds(10)
                return response
            },
            configure: { $0.upstream.timeout = .milliseconds(300) }
        ) { proxy async throws in
            let reply = try await proxy.get("/screens/home")
            #expect(reply.status == .gatewayTimeout)
            #expect(reply.body.contains(#""kind":"timeout""#))
        }
    }

    @Test("a target that is not a path is a 400 of kind url")
    func badTarget() async throws {
        try await ProxyHarness.run { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n")
            let response = try #require(try await connection.readResponse())
            #expect(response.head.hasPrefix("HTTP/1.1 400"))
            #expect(response.body.contains(#""kind":"url""#))
            await connection.close()
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("least recently used entries are evicted to stay inside the byte budget")
    func evictionUnderBudget() async throws {
        let padding = String(repeating: "x", count: 900)
        try await ProxyHarness.run(
            origin: { _ in .component(extra: #","pad":"\#(padding)""#) },
            // Identity only, so that each entry's cost is its one form's.
            configure: {
                $0.cache.maxBytes = 4096
                $0.compression.encodings = []
            }
        ) { proxy async throws in
            for name in ["a", "b", "c"] { _ = try await proxy.get("/\(name)") }
            _ = try await proxy.get("/a")  // a is now the most recently used
            _ = try await proxy.get("/d")  // evicts b, the least recently used
            let statistics = proxy.server.context.cache.statistics
            #expect(statistics.bytes <= 4096)
            #expect(statistics.evictions >= 1)
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
            #expect(try await proxy.get("/b")["X-Cache"] == "MISS")
        }
    }

    @Test("requests with Authorization are not served from the shared cache")
    func authorizationBypassesLookup() async throws {
        try await ProxyHarness.run { proxy async throws in
            _ = try await proxy.get("/me")
            let withCredentials = try await proxy.get("/me", headers: [("Authorization", "Bearer t")])
            #expect(withCredentials["X-Cache"] != "HIT")
            #expect(proxy.origin.requests(to: "/me").count == 2)
            #expect(proxy.origin.requests.last?.headers.first(name: "authorization") == "Bearer t")
        }
    }

    @Test("bypass routes are forwarded every time and marked BYPASS")
    func bypassRoute() async throws {
        try await ProxyHarness.run(configure: {
            var policy = ProxyConfiguration.RoutePolicy()
            policy.bypass = true
            $0.cache.routes = [.init(prefix: "/api/session", policy: policy)]
        }) { proxy async throws in
            #expect(try await proxy.get("/api/session/me")["X-Cache"] == "BYPASS")
            #expect(try await proxy.get("/api/session/me")["X-Cache"] == "BYPASS")
            #expect(proxy.origin.requestCount == 2)
        }
    }
}
