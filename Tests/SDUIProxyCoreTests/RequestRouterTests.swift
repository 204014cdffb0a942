import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("The request router")
struct RequestRouterTests {
    static let yaml = """
        upstream: { url: "http://127.0.0.1:9" }
        platform: { header: X-Platform, default: WEB, allowed: [IOS, ANDROID, WEB] }
        cache:
          routes:
            - { prefix: /api/session, bypass: true }
            - { prefix: /screens/, vary: [Accept-Language] }
        queue:
          maxBodyBytes: 1KiB
          routes:
            - match: POST /api/orders
        """

    static func router() throws -> RequestRouter {
        let configuration = try ConfigurationLoader().load(yaml: yaml)
        return RequestRouter(configuration: configuration, queue: configuration.queue)
    }

    static func head(_ method: HTTPMethod, _ uri: String, _ headers: [(String, String)] = []) -> HTTPRequestHead {
        HTTPRequestHead(
            version: .http1_1,
            method: method,
            uri: uri,
            headers: HTTPHeaders([("Host", "proxy.example")] + headers)
        )
    }

    @Test("GET and HEAD go through the cache, keyed by target, platform and the route's vary headers")
    func cachePath() throws {
        let router = try Self.router()
        for method in [HTTPMethod.GET, .HEAD] {
            guard
                case .cache(let request) = router.route(
                    Self.head(method, "/screens/home?b=1", [("x-platform", "ios"), ("Accept-Language", "pt")])
                )
            else {
                Issue.record("\(method) not routed through the cache")
                continue
            }
            #expect(request.platform == "IOS")
            #expect(request.key == CacheKey(target: "/screens/home?b=1", platform: "IOS", varyValues: ["pt"]))
            #expect(request.isHead == (method == .HEAD))
        }
    }

    @Test("GET and HEAD of /.sdui/queue/ID ask for a queued write's status, only when there is a queue")
    func queueStatus() throws {
        let router = try Self.router()
        for method in [HTTPMethod.GET, .HEAD] {
            guard case .queueStatus(let id) = router.route(Self.head(method, "/.sdui/queue/0123abc?x=1")) else {
                Issue.record("\(method) of a queue status not routed to it")
                continue
            }
            #expect(id == "0123abc")
        }
        // No id, a path below one, or another method: not a status.
        for (method, uri) in [
            (HTTPMethod.GET, "/.sdui/queue/"), (.GET, "/.sdui/queue/a/b"), (.DELETE, "/.sdui/queue/a"),
        ] {
            if case .queueStatus = router.route(Self.head(method, uri)) { Issue.record("\(method) \(uri)") }
        }
        // A proxy without a queue passes the path to the backend like any other.
        let configuration = try ConfigurationLoader().load(yaml: #"upstream: { url: "http://127.0.0.1:9" }"#)
        let withoutQueue = RequestRouter(configuration: configuration, queue: nil)
        guard case .cache = withoutQueue.route(Self.head(.GET, "/.sdui/queue/0123abc")) else {
            return #expect(Bool(false), "routed as a queue status without a queue")
        }
    }

    @Test("a bypass route is forwarded with X-Cache BYPASS; other methods are forwarded without it")
    func forwards() throws {
        let router = try Self.router()
        guard
            case .forward(let target, let platform, let cacheResult, _) = router.route(Self.head(.GET, "/api/session"))
        else { return #expect(Bool(false), "bypass route not forwarded") }
        #expect(target.path == "/api/session")
        #expect(platform == "WEB")
        #expect(cacheResult == .bypass)
        guard case .forward(_, _, let unsafe, _) = router.route(Self.head(.DELETE, "/screens/home")) else {
            return #expect(Bool(false), "DELETE not forwarded")
        }
        #expect(unsafe == nil)
    }

    @Test("a queued route holds its body up to queue.maxBodyBytes; a larger declared body is refused at once")
    func queuedWrites() throws {
        let router = try Self.router()
        guard case .queuedWrite(_, _, let route, let limit) = router.route(Self.head(.POST, "/api/orders/7")) else {
            return #expect(Bool(false), "queued route not recognised")
        }
        #expect(route.pathPrefix == "/api/orders")
        #expect(limit == 1024)
        guard
            case .refuse(let error, let close) = router.route(
                Self.head(.POST, "/api/orders", [("Content-Length", "2048")])
            )
        else { return #expect(Bool(false), "oversized queued body accepted") }
        #expect(error.status == .payloadTooLarge)
        #expect(close)
        // The same length repeated in a list is that length, refused as early.
        guard
            case .refuse(let listed, true) = router.route(
                Self.head(.POST, "/api/orders", [("Content-Length", "2048, 2048")])
            )
        else { return #expect(Bool(false), "an oversized body declared as a list accepted") }
        #expect(listed.status == .payloadTooLarge)
        guard case .forward = router.route(Self.head(.PUT, "/api/orders")) else {
            return #expect(Bool(false), "another method on a queued path is not queued")
        }
    }

    @Test("refusals: an unknown platform once the request is read, broken framing at once with a close")
    func refusals() throws {
        let router = try Self.router()
        guard
            case .refuse(let platformError, let closes) = router.route(
                Self.head(.GET, "/screens/home", [("X-Platform", "PALM")])
            )
        else { return #expect(Bool(false), "unknown platform accepted") }
        #expect(platformError.status == .badRequest)
        #expect(!closes)
        guard
            case .refuse(_, let smuggling) = router.route(
                Self.head(.POST, "/x", [("Content-Length", "1"), ("Transfer-Encoding", "chunked")])
            )
        else { return #expect(Bool(false), "ambiguous framing accepted") }
        #expect(smuggling)
    }

    @Test("an allowed platform sent as configured is used as it is; a name made in code that is no platform is not")
    func allowedPlatformsAsSent() throws {
        var configuration = try ConfigurationLoader().load(yaml: Self.yaml)
        // The loader refuses such a name; a configuration made in code is not checked by it.
        configuration.platform.allowed = ["IOS", "NOT A PLATFORM"]
        let router = RequestRouter(configuration: configuration, queue: nil)
        guard case .cache(let request) = router.route(Self.head(.GET, "/screens/a", [("X-Platform", "IOS")])) else {
            return #expect(Bool(false), "an allowed platform refused")
        }
        #expect(request.platform == "IOS")
        guard
            case .refuse(let error, _) = router.route(
                Self.head(.GET, "/screens/a", [("X-Platform", "NOT A PLATFORM")])
            )
        else { return #expect(Bool(false), "a name that is no platform accepted") }
        #expect(error.status == .badRequest)
    }

    @Test("the prefetcher's request for a target keys the same entry as a client's GET for it")
    func prefetchKeysLikeAClient() throws {
        let router = try Self.router()
        let headers = HTTPHeaders([("X-Platform", "ANDROID")])
        let prefetch = try #require(
            router.cacheRequest(target: RequestTarget(parsing: "/screens/a"), platform: "ANDROID", headers: headers)
        )
        guard case .cache(let client) = router.route(Self.head(.GET, "/screens/a", [("X-Platform", "ANDROID")])) else {
            return #expect(Bool(false))
        }
        #expect(prefetch.key == client.key)
        let bypass = try RequestTarget(parsing: "/api/session")
        #expect(router.cacheRequest(target: bypass, platform: "IOS", headers: HTTPHeaders()) == nil)
    }
}
