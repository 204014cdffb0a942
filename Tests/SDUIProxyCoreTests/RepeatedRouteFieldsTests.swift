import NIOHTTP1
import Testing

@testable import SDUIProxyCore

/// What routing reads of a head's fields, taken again for a next head with the same fields
/// (``RepeatedRouteFields``): every head must still be routed as it would be alone.
@Suite("Routing a connection's heads that repeat the last head's fields")
struct RepeatedRouteFieldsTests {
    /// ``RequestRouterTests``' configuration, with `header` as the platform header.
    private static func router(header: String) throws -> RequestRouter {
        precondition(RequestRouterTests.yaml.contains("header: X-Platform"), "the platform header to replace")
        let configuration = try ConfigurationLoader().load(
            yaml: RequestRouterTests.yaml.replacing("header: X-Platform", with: "header: \(header)")
        )
        return RequestRouter(configuration: configuration, queue: configuration.queue)
    }

    /// Field sets a client might send, some of which routing refuses.
    private static let fieldSets: [[(String, String)]] = [
        [("Host", "proxy"), ("X-Platform", "IOS"), ("Accept-Encoding", "br, gzip")],
        [("Host", "proxy"), ("X-Platform", "ANDROID"), ("Accept-Language", "pt")],
        [("Host", "proxy"), ("X-Platform", " ios ")],
        [("Host", "proxy"), ("X-Platform", "IOS"), ("x-platform", "WEB")],
        [("Host", "proxy"), ("X-Platform", "TOASTER")],
        [("Host", "proxy"), ("Host", "other")],
        [("X-Platform", "IOS")],
        [("Host", "proxy"), ("Content-Length", "5")],
        [("Host", "proxy"), ("Content-Length", "5, 6")],
        [("Host", "proxy"), ("Content-Length", "4096")],
        [("Host", "proxy"), ("Transfer-Encoding", "chunked")],
        [("Host", "proxy"), ("Transfer-Encoding", "gzip")],
        [("Host", "proxy"), ("If-None-Match", "\"a\""), ("Cookie", String(repeating: "c", count: 3000))],
    ]
    private static let requests: [(HTTPMethod, String)] = [
        (.GET, "/screens/home"), (.HEAD, "/screens/a?b=1"), (.GET, "/api/session/x"), (.POST, "/api/orders"),
        (.GET, "/.sdui/queue/abc"), (.CONNECT, "/screens/home"), (.GET, "/" + String(repeating: "p", count: 9000)),
        (.GET, "http://proxy/screens/home"), (.GET, "screens"),
    ]

    /// Everything a route says, a cache request's platform, key, fields and `Accept-Encoding` included.
    private static func describe(_ route: RequestRouter.Route) -> String {
        guard case .cache(let request) = route else { return "\(route)" }
        return "cache \(request.target) \(request.platform) \(request.key) \(request.fields.rawValue) "
            + "\(request.acceptEncoding ?? "-") \(request.policy.bypass) \(request.policy.vary)"
    }

    @Test("random heads on one connection, with the same fields, a copy of them, or others, route as alone")
    func headsRouteAsAlone() throws {
        let routers = [try Self.router(header: "X-Platform"), try Self.router(header: "Accept-Language")]
        let repeated = RepeatedRouteFields()
        var random = SplitMix64(seed: 0x40_07E5)
        var headers = HTTPHeaders(Self.fieldSets[0])
        var taken = 0
        for round in 0..<3000 {
            switch random.next() % 4 {
            case 0:
                // Other fields, or the same ones stored apart (`map` makes a list of their own).
                headers = HTTPHeaders(Self.fieldSets[Int(random.next() % UInt64(Self.fieldSets.count))].map { $0 })
            default:
                break  // the same collection again, as a repeated head hands it out
            }
            let (method, uri) = Self.requests[Int(random.next() % UInt64(Self.requests.count))]
            let version: HTTPVersion = random.next() % 8 == 0 ? .http1_0 : .http1_1
            let head = HTTPRequestHead(version: version, method: method, uri: uri, headers: headers)
            // Mostly one router; now and then the reloaded configuration's, which reads the fields its own way.
            let router = routers[random.next() % 10 == 0 ? 1 : 0]
            if repeated.reading(of: headers, by: router.identity) != nil { taken += 1 }
            let alone = Self.describe(router.route(head))
            #expect(Self.describe(router.route(head, repeating: repeated)) == alone, "round \(round): \(method) \(uri)")
        }
        // Enough heads took what was read of the last one's fields for the comparison to be about them.
        #expect(taken > 700)
    }

    @Test("the same fields are read once; fields stored apart, or read by another router, are read again")
    func sameFieldsAreReadOnce() throws {
        let router = try Self.router(header: "X-Platform")
        let reloaded = try Self.router(header: "X-Platform")
        let repeated = RepeatedRouteFields()
        let headers = HTTPHeaders(Self.fieldSets[0])
        #expect(repeated.reading(of: headers, by: router.identity) == nil)
        _ = router.route(
            HTTPRequestHead(version: .http1_1, method: .GET, uri: "/screens/a", headers: headers),
            repeating: repeated
        )
        #expect(repeated.reading(of: headers, by: router.identity) != nil)
        #expect(repeated.reading(of: headers, by: reloaded.identity) == nil)
        #expect(repeated.reading(of: HTTPHeaders(Self.fieldSets[0].map { $0 }), by: router.identity) == nil)

        // Fields larger than a repeated head's can be are not kept, and what was kept before is let go.
        let large = HTTPHeaders(Self.fieldSets[12])
        _ = router.route(
            HTTPRequestHead(version: .http1_1, method: .GET, uri: "/screens/a", headers: large),
            repeating: repeated
        )
        #expect(repeated.reading(of: large, by: router.identity) == nil)
        #expect(repeated.reading(of: headers, by: router.identity) == nil)
    }
}
