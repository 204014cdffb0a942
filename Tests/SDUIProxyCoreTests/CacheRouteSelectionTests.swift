import SDUIProxyCore
import Testing

/// Which route's policy a request path gets (`cache.routes`): the longest prefix the path starts with, the first
/// listed among equally long ones, the cache's own policy when none matches.
@Suite struct CacheRouteSelectionTests {
    /// A cache whose routes are told apart by their default TTL, in seconds.
    private func cache(_ routes: [(prefix: String, ttl: Int64)]) -> ProxyConfiguration.Cache {
        var cache = ProxyConfiguration.Cache()
        cache.policy.defaultTTL = .seconds(1)
        cache.routes = routes.map { route in
            var policy = ProxyConfiguration.RoutePolicy()
            policy.defaultTTL = .seconds(route.ttl)
            return ProxyConfiguration.Route(prefix: route.prefix, policy: policy)
        }
        return cache
    }

    @Test(
        "the longest matching prefix wins, whatever the order the routes are listed in",
        arguments: [
            ("/assets/private/a", 30),
            ("/assets/logo.png", 20),
            ("/assets/", 20),
            ("/assets", 1),
            ("/screens/home", 1),
            ("/", 1),
        ]
    )
    func longestPrefix(path: String, ttl: Int64) {
        let listed = [(prefix: "/assets/", ttl: Int64(20)), (prefix: "/assets/private/", ttl: Int64(30))]
        #expect(cache(listed).policy(forPath: path).defaultTTLSeconds == ttl)
        #expect(cache(Array(listed.reversed())).policy(forPath: path).defaultTTLSeconds == ttl)
    }

    @Test("among prefixes of one length, the first listed; a prefix is matched as bytes, not as a path segment")
    func tiesAndBytes() {
        let routes = cache([("/a", 10), ("/a", 11), ("/ab", 12), ("/api/", 13)])
        #expect(routes.policy(forPath: "/a").defaultTTLSeconds == 10)
        #expect(routes.policy(forPath: "/a?x=1").defaultTTLSeconds == 10)
        #expect(routes.policy(forPath: "/abc").defaultTTLSeconds == 12)
        #expect(routes.policy(forPath: "/api").defaultTTLSeconds == 10)
        #expect(routes.policy(forPath: "/api/v1").defaultTTLSeconds == 13)
        // Percent-encoded paths compare as sent: no decoding makes `%2F` a slash.
        #expect(routes.policy(forPath: "/api%2Fv1").defaultTTLSeconds == 10)
        #expect(routes.policy(forPath: "").defaultTTLSeconds == 1)
    }

    @Test("without routes every path gets the cache's policy")
    func noRoutes() {
        #expect(cache([]).policy(forPath: "/screens/home").defaultTTLSeconds == 1)
    }
}
