import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("The request fields the cache path and forwards ask about")
struct RequestFieldPresenceTests {
    @Test("each is found under any case, and no other name counts")
    func names() {
        let headers = HTTPHeaders([
            ("Host", "proxy"), ("IF-NONE-MATCH", #""a""#), ("if-modified-since", "Sun, 22 Nov 2026 03:00:00 GMT"),
            ("Range", "bytes=0-1"), ("Cache-control", "no-cache"), ("authorization", "Bearer x"),
            ("X-REQUEST-ID", "abc"), ("accept-Encoding", "gzip"), ("CONNECTION", "x-a"), ("Content-length", "0"),
            ("transfer-ENCODING", "chunked"),
        ])
        #expect(
            RequestFieldPresence(headers) == [
                .ifNoneMatch, .ifModifiedSince, .range, .cacheControl, .authorization, .requestID, .acceptEncoding,
                .connection, .contentLength, .transferEncoding,
            ]
        )
        let lookalikes = HTTPHeaders([
            ("If-Range", #""a""#), ("Ranges", "x"), ("If-Match", #""a""#), ("Cache-Controls", "x"),
            ("Authorisation", "x"),
            ("if-unmodified-since", "Sun, 22 Nov 2026 03:00:00 GMT"), ("Accept-Encodings", "gzip"),
            ("X-Request-Ids", "abc"), ("Request-Id", "abc"), ("Accept-Language", "en"), ("Connections", "x"),
            ("Proxy-Connection", "close"), ("Content-Type", "text/plain"), ("Content-Lengths", "0"),
            ("Content-Encoding", "gzip"), ("Transfer-Encodings", "chunked"), ("TE", "trailers"),
        ])
        #expect(RequestFieldPresence(lookalikes).isEmpty)
        #expect(RequestFieldPresence(HTTPHeaders()).isEmpty)
    }

    @Test("the router notes them in the walk that finds the platform, and a second platform header is still refused")
    func router() throws {
        let router = try RequestRouterTests.router()
        guard
            case .cache(let request) = router.route(
                RequestRouterTests.head(.GET, "/screens/a", [("x-platform", "ios"), ("If-None-Match", #""v""#)])
            )
        else {
            Issue.record("a GET is not routed through the cache")
            return
        }
        #expect(request.fields == .ifNoneMatch)
        #expect(request.platform == "IOS")
        guard
            case .cache(let plain) = router.route(RequestRouterTests.head(.GET, "/screens/a", [("Range", "bytes=0-0")]))
        else {
            Issue.record("a GET is not routed through the cache")
            return
        }
        #expect(plain.fields == .range && plain.platform == "WEB")
        #expect(plain.acceptEncoding == nil)
        guard
            case .cache(let coded) = router.route(
                RequestRouterTests.head(
                    .GET,
                    "/screens/a",
                    [("Accept-Encoding", "br;q=0"), ("X-Request-Id", "r1"), ("accept-encoding", "gzip")]
                )
            )
        else {
            Issue.record("a GET is not routed through the cache")
            return
        }
        // The first value, as `HTTPHeaders.first(name:)` gives it; the id is only noted, searched for on a hit.
        #expect(coded.acceptEncoding == "br;q=0")
        #expect(coded.fields == [.acceptEncoding, .requestID])
        // A request made without a walk (a prefetch's) finds both in its head.
        let built = try #require(
            router.cacheRequest(
                target: try RequestTarget(parsing: "/screens/a"),
                platform: "WEB",
                headers: ["Accept-Encoding": "gzip"]
            )
        )
        #expect(built.acceptEncoding == "gzip" && built.fields == .acceptEncoding)
        guard
            case .refuse = router.route(
                RequestRouterTests.head(.GET, "/screens/a", [("X-Platform", "IOS"), ("x-platform", "WEB")])
            )
        else {
            Issue.record("two platform headers are not refused")
            return
        }
    }

    @Test("a forward carries what the router noted: framing fields, Connection and the client's id, or none")
    func forwards() throws {
        let router = try RequestRouterTests.router()
        let posted = router.route(
            RequestRouterTests.head(
                .POST,
                "/screens/a",
                [("Content-Length", "2"), ("Connection", "x-trace"), ("X-Request-Id", "r1")]
            )
        )
        guard case .forward(_, _, _, let fields) = posted else {
            Issue.record("a POST is not forwarded")
            return
        }
        #expect(fields == [.contentLength, .connection, .requestID])
        guard
            case .forward(_, _, _, let chunked) = router.route(
                RequestRouterTests.head(.PUT, "/screens/a", [("Transfer-Encoding", "chunked")])
            )
        else {
            Issue.record("a PUT is not forwarded")
            return
        }
        #expect(chunked == .transferEncoding)
        guard case .forward(_, _, .bypass, let bypassed) = router.route(RequestRouterTests.head(.GET, "/api/session"))
        else {
            Issue.record("a bypass route is not forwarded")
            return
        }
        #expect(bypassed.isEmpty)
    }

    @Test("a platform header that is also a noted field is still noted, its value kept")
    func platformHeaderNamedAsANotedField() throws {
        var configuration = ProxyConfiguration()
        configuration.platform.header = "X-Request-Id"
        let router = RequestRouter(configuration: configuration, queue: nil)
        guard
            case .cache(let request) = router.route(
                RequestRouterTests.head(.GET, "/screens/a", [("x-request-id", "WEB"), ("Accept-Encoding", "br")])
            )
        else {
            Issue.record("a GET is not routed through the cache")
            return
        }
        #expect(request.platform == "WEB")
        #expect(request.fields == [.requestID, .acceptEncoding] && request.acceptEncoding == "br")
    }
}
