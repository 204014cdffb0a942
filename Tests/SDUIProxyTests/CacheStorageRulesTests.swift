import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// What is stored and for how long, against a real origin over loopback: statuses and `must-understand` (RFC
/// 9111 §3, §5.2.2.3), heuristic freshness (§4.2.2), stale-if-error by default (§4.2.4), targeted fields (RFC
/// 9213), `Set-Cookie` (§3.1, §7.3) and the operator's caps.
@Suite("RFC 9111 and RFC 9213: what is stored, and for how long")
struct CacheStorageRulesTests {
    private static let component = #"{"_beagleComponent_":"a"}"#

    private static func origin(status: HTTPResponseStatus = .ok, _ headers: [(String, String)]) -> TestOrigin.Responder
    {
        { _ in
            TestOrigin.Response(
                status: status,
                headers: [("Content-Type", "application/json")] + headers,
                body: Self.component
            )
        }
    }

    /// Whether a second GET of `/a` is a hit, with the origin answering `headers` each time.
    private static func isStored(
        status: HTTPResponseStatus = .ok,
        _ headers: [(String, String)],
        configure: ((inout ProxyConfiguration) -> Void)? = nil
    ) async throws -> Bool {
        var hit = false
        try await ProxyHarness.run(origin: origin(status: status, headers), configure: configure) {
            proxy async throws in
            _ = try await proxy.get("/a")
            let second = try await proxy.get("/a")
            #expect(second.status == status)
            hit = second["X-Cache"] == "HIT"
            #expect(proxy.origin.requestCount == (hit ? 1 : 2))
        }
        return hit
    }

    @Test("RFC 9111 §5.2.2.3: must-understand stores an understood status despite no-store, and not 599")
    func mustUnderstand() async throws {
        let directives = [("Cache-Control", "no-store, must-understand, max-age=60")]
        #expect(try await Self.isStored(directives))
        #expect(try await Self.isStored(status: .notFound, directives))
        #expect(try await !Self.isStored(status: .init(statusCode: 599), directives))
    }

    @Test("cache.maxErrorTTL caps stored errors: 0s keeps a 500 out, a 200 is stored as before")
    func maxErrorTTL() async throws {
        let noErrors: (inout ProxyConfiguration) -> Void = { $0.cache.storageRules.maxErrorLifetime = 0 }
        #expect(
            try await !Self.isStored(
                status: .internalServerError,
                [("Cache-Control", "max-age=600")],
                configure: noErrors
            )
        )
        #expect(try await Self.isStored([("Cache-Control", "max-age=600")], configure: noErrors))
        #expect(try await Self.isStored(status: .internalServerError, [("Cache-Control", "max-age=600")]))
    }

    @Test("RFC 9111 §4.2.2: Last-Modified well before Date makes a heuristic lifetime; heuristic.max 0s turns it off")
    func heuristicFreshness() async throws {
        let now = HTTPDate.now()
        let dated = [("Date", HTTPDate.format(now)), ("Last-Modified", HTTPDate.format(now - 36_000))]
        #expect(try await Self.isStored(dated))
        #expect(try await Self.isStored(status: .notFound, dated))
        #expect(try await !Self.isStored(status: .internalServerError, dated), "500 is not heuristically cacheable")
        #expect(try await Self.isStored(status: .internalServerError, dated + [("Cache-Control", "public")]))
        #expect(try await !Self.isStored(dated) { $0.cache.storageRules.heuristicMaximum = 0 })
        let modifiedLater = [("Date", HTTPDate.format(now)), ("Last-Modified", HTTPDate.format(now + 60))]
        #expect(try await !Self.isStored(modifiedLater))
    }

    @Test("RFC 9111 §5.4: Pragma: no-cache in a response changes nothing")
    func pragma() async throws {
        #expect(try await Self.isStored([("Pragma", "no-cache"), ("Cache-Control", "max-age=60")]))
    }

    @Test(
        "RFC 9213 §2.1: a valid CDN-Cache-Control decides alone, an invalid one is ignored",
        arguments: [
            ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=600")], true),
            ([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "private")], false),
            ([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "no-store")], false),
            ([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=3600"), ("Age", "7200")], false),
            // max-age=1 governs, not 3600: the entry is stale when stored.
            ([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=1"), ("Age", "2")], false),
            ([("Cache-Control", "max-age=3600"), ("Age", "2")], true),
            ([("Cache-Control", "max-age=60"), ("CDN-Cache-Control", "max-age =100")], true),
            ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=\"10\"")], false),
            ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "MaX-aGe=10")], false),
            ([("Expires", HTTPDate.format(HTTPDate.now() + 600)), ("CDN-Cache-Control", "public")], false),
        ] as [([(String, String)], Bool)]
    )
    func targetedField(headers: [(String, String)], stored: Bool) async throws {
        #expect(try await Self.isStored(headers) == stored, "\(headers)")
    }

    @Test("RFC 9213 §2.1: targeted fields are forwarded unchanged, beside Cache-Control")
    func targetedFieldsForwarded() async throws {
        try await ProxyHarness.run(
            origin: Self.origin([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=600")])
        ) { proxy async throws in
            for expected in ["MISS", "HIT"] {
                let reply = try await proxy.get("/a")
                #expect(reply["X-Cache"] == expected)
                #expect(reply["CDN-Cache-Control"] == "max-age=600")
                #expect(reply["Cache-Control"] == "max-age=3600")
            }
        }
    }

    @Test("cache.targetedFields: [] obeys Cache-Control only")
    func targetedFieldsOff() async throws {
        let headers = [("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=600")]
        #expect(try await !Self.isStored(headers) { $0.cache.storageRules.targetedFields = [] })
    }

    @Test("RFC 9111 §7.3: Set-Cookie is stored, replayed on hits, and replaced by a 304's")
    func setCookie() async throws {
        try await ProxyHarness.run(origin: { request in
            if request.headers.first(name: "if-none-match") == "\"v1\"" {
                return TestOrigin.Response(
                    status: .notModified,
                    headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=60"), ("Set-Cookie", "c=3")],
                    body: ""
                )
            }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("ETag", "\"v1\""), ("Cache-Control", "max-age=0"),
                    ("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2"),
                ],
                body: Self.component
            )
        }) { proxy async throws in
            let first = try await proxy.get("/a")
            #expect(first.headers["Set-Cookie"] == ["a=1; Path=/", "b=2"])
            let revalidated = try await proxy.get("/a")
            #expect(revalidated["X-Cache"] == "REVALIDATED")
            #expect(revalidated.headers["Set-Cookie"] == ["c=3"])
            let hit = try await proxy.get("/a")
            #expect(hit["X-Cache"] == "HIT")
            #expect(hit.headers["Set-Cookie"] == ["c=3"])
            #expect(proxy.origin.requestCount == 2)
        }
    }

    /// How a refresh fails in ``staleIfErrorByDefault(failure:)``.
    enum Failure: String, CaseIterable, Sendable {
        case refused, timeout, status500, status502, status503, status504
    }

    @Test(
        "RFC 9111 §4.2.4: by default a stale entry stands in for a refresh that fails",
        arguments: Failure.allCases
    )
    func staleIfErrorByDefault(failure: Failure) async throws {
        let failing = NIOLockedValueBox(false)
        // Holds the failing answer past upstream.timeout; opened at the end so the origin can stop.
        let held = OriginGate()
        try await ProxyHarness.run(
            origin: { _ in
                guard failing.withLockedValue({ $0 }) else {
                    return TestOrigin.Response(
                        headers: [("Content-Type", "application/json"), ("Age", "5"), ("Cache-Control", "max-age=1")],
                        body: Self.component
                    )
                }
                switch failure {
                case .timeout:
                    var response = TestOrigin.Response.component()
                    response.heldBy = held
                    return response
                case .status500: return TestOrigin.Response(status: .internalServerError, body: "down")
                case .status502: return TestOrigin.Response(status: .badGateway, body: "down")
                case .status504: return TestOrigin.Response(status: .gatewayTimeout, body: "down")
                case .refused, .status503: return TestOrigin.Response(status: .serviceUnavailable, body: "down")
                }
            },
            // The first answer gets the default limit, which a loaded machine does not reach.
        ) { proxy async throws in
            let first = try await proxy.get("/a")
            #expect(first.status == .ok)
            #expect(first["X-Cache"] == "MISS")
            if failure == .timeout {
                // Then a short one, which fails the held refresh soon: a reload keeps the stored entry.
                var configuration = proxy.server.context.configuration
                configuration.upstream.timeout = .seconds(1)
                try await proxy.server.reload(configuration)
            }
            failing.withLockedValue { $0 = true }
            if failure == .refused { try await proxy.origin.stop() }
            let stale = try await proxy.get("/a")
            held.open()
            #expect(stale.status == .ok)
            #expect(stale["X-Cache"] == "STALE")
            #expect(stale.body == Self.component)
            if failure == .refused { try await proxy.origin.restart() }
        }
    }

    @Test("RFC 9111 §4.2.4: a stale 200 stands in for a fresh 500 that would otherwise be stored")
    func staleSuccessOverFreshError() async throws {
        let failing = NIOLockedValueBox(false)
        try await ProxyHarness.run(origin: { _ in
            if failing.withLockedValue({ $0 }) {
                return TestOrigin.Response(
                    status: .internalServerError,
                    headers: [("Cache-Control", "max-age=600")],
                    body: "down"
                )
            }
            return TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("ETag", "\"v1\""), ("Cache-Control", "max-age=0")],
                body: Self.component
            )
        }) { proxy async throws in
            _ = try await proxy.get("/a")
            failing.withLockedValue { $0 = true }
            let stale = try await proxy.get("/a")
            #expect(stale.status == .ok)
            #expect(stale["X-Cache"] == "STALE")
            #expect(try await proxy.get("/a").status == .ok, "the error was not stored over the entry")
        }
    }

    @Test(
        "RFC 9111 §4.2.4: never stale under must-revalidate, proxy-revalidate, no-cache, or a bare s-maxage",
        arguments: ["max-age=1, must-revalidate", "max-age=1, proxy-revalidate", "no-cache", "s-maxage=1"]
    )
    func noStaleWhenForbidden(cacheControl: String) async throws {
        let failing = NIOLockedValueBox(false)
        try await ProxyHarness.run(origin: { _ in
            if failing.withLockedValue({ $0 }) {
                return TestOrigin.Response(status: .serviceUnavailable, body: "down")
            }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Age", "5"), ("ETag", "\"v1\""),
                    ("Cache-Control", cacheControl),
                ],
                body: Self.component
            )
        }) { proxy async throws in
            _ = try await proxy.get("/a")
            failing.withLockedValue { $0 = true }
            #expect(try await proxy.get("/a").status == .serviceUnavailable, "\(cacheControl)")
        }
    }
}

/// A client's own request directives (RFC 9111 section 5.2.1), against a real origin over loopback.
@Suite("RFC 9111 §5.2.1: request directives")
struct RequestDirectivesTests {
    @Test("RFC 9111 §5.2.1.7: only-if-cached gets a stored answer or a 504, and never reaches the backend")
    func onlyIfCached() async throws {
        try await ProxyHarness.run(origin: { request in
            TestOrigin.Response.component(maxAge: request.uri == "/stale" ? 0 : 60).withHeader("ETag", "\"v1\"")
        }) { proxy async throws in
            let cold = try await proxy.get("/a", headers: [("Cache-Control", "only-if-cached")])
            #expect(cold.status == .gatewayTimeout)
            #expect(cold.body.contains(#""kind":"notCached""#))
            #expect(proxy.origin.requestCount == 0)
            _ = try await proxy.get("/a")
            #expect(try await proxy.get("/a", headers: [("Cache-Control", "only-if-cached")])["X-Cache"] == "HIT")
            _ = try await proxy.get("/stale")
            #expect(
                try await proxy.get("/stale", headers: [("Cache-Control", "only-if-cached")]).status == .gatewayTimeout
            )
            let accepted = try await proxy.get("/stale", headers: [("Cache-Control", "only-if-cached, max-stale")])
            #expect(accepted["X-Cache"] == "STALE")
            #expect(accepted.status == .ok)
            let withCredentials = try await proxy.get(
                "/a",
                headers: [("Cache-Control", "only-if-cached"), ("Authorization", "Bearer x")]
            )
            #expect(withCredentials.status == .gatewayTimeout)
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("a client's no-cache and max-age=0 are ignored by default, and revalidate with cache.honorClientNoCache")
    func clientNoCache() async throws {
        for honors in [false, true] {
            try await ProxyHarness.run(
                origin: { request in
                    if request.headers.first(name: "if-none-match") == "\"v1\"" {
                        return TestOrigin.Response(status: .notModified, headers: [("ETag", "\"v1\"")], body: "")
                    }
                    return TestOrigin.Response.component().withHeader("ETag", "\"v1\"")
                },
                configure: { $0.cache.honorClientNoCache = honors }
            ) { proxy async throws in
                _ = try await proxy.get("/a")
                for directive in ["no-cache", "max-age=0"] {
                    let reply = try await proxy.get("/a", headers: [("Cache-Control", directive)])
                    #expect(reply["X-Cache"] == (honors ? "REVALIDATED" : "HIT"), "\(directive)")
                }
                #expect(proxy.origin.requestCount == (honors ? 3 : 1))
                #expect(
                    proxy.origin.requests(to: "/a").dropFirst().allSatisfy { $0.headers["if-none-match"] == ["\"v1\""] }
                )
            }
        }
    }
}
