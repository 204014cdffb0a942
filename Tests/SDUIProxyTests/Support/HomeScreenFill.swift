import NIOHTTP1
import SDUIProxyCore

@testable import SDUIProxy

extension ComponentFetcher.Request {
    /// A cache fill of `/screens/home` for the web platform, from a client whose headers are `clientHeaders`: where
    /// the tests of a fill's rules start.
    static func homeScreen(
        clientHeaders: HTTPHeaders,
        clientFields: RequestFieldPresence? = nil,
        mayCoalesce: Bool = true,
        replacing staleEntry: CachedResponse? = nil,
        preparesEveryCoding: Bool = false
    ) -> ComponentFetcher.Request {
        ComponentFetcher.Request(
            key: CacheKey(target: "/screens/home", platform: "WEB"),
            upstream: UpstreamRequest(method: .GET, target: "/screens/home", headers: [:]),
            policy: ProxyConfiguration.RoutePolicy(),
            clientHeaders: clientHeaders,
            clientFields: clientFields,
            mayCoalesce: mayCoalesce,
            staleEntry: staleEntry,
            preparesEveryCoding: preparesEveryCoding
        )
    }
}
