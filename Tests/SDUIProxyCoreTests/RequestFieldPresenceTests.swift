import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("The request fields the cache path asks about")
struct RequestFieldPresenceTests {
    @Test("each is found under any case, and no other name counts")
    func names() {
        let headers = HTTPHeaders([
            ("Host", "proxy"), ("IF-NONE-MATCH", #""a""#), ("if-modified-since", "Sun, 22 Nov 2026 03:00:00 GMT"),
            ("Range", "bytes=0-1"), ("Cache-control", "no-cache"), ("authorization", "Bearer x"),
        ])
        #expect(
            RequestFieldPresence(headers) == [.ifNoneMatch, .ifModifiedSince, .range, .cacheControl, .authorization]
        )
        let lookalikes = HTTPHeaders([
            ("If-Range", #""a""#), ("Ranges", "x"), ("If-Match", #""a""#), ("Cache-Controls", "x"),
            ("Authorisation", "x"),
            ("if-unmodified-since", "Sun, 22 Nov 2026 03:00:00 GMT"), ("Accept-Encoding", "gzip"),
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
        guard
            case .refuse = router.route(
                RequestRouterTests.head(.GET, "/screens/a", [("X-Platform", "IOS"), ("x-platform", "WEB")])
            )
        else {
            Issue.record("two platform headers are not refused")
            return
        }
    }
}
