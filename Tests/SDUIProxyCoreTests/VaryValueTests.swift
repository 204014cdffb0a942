import NIOHTTP1
import SDUIProxyCore
import Testing

/// The request values a variant is selected by (RFC 9111 section 4.1), normalised but never reordered.
@Suite struct VaryValueTests {
    @Test(
        "lines become one list; whitespace and empty members go; case only where values ignore it",
        arguments: [
            (["en-US , fr"], "accept-language", "en-us,fr"),
            (["en-US", " fr\t"], "accept-language", "en-us,fr"),
            (["fr,en-US"], "accept-language", "fr,en-us"),
            (["en;q=0.5, fr;q=1"], "accept-language", "en;q=0.5,fr;q=1"),
            ([",,GZIP,"], "accept-encoding", "gzip"),
            (["Dark , Wide"], "x-theme", "Dark,Wide"),
            ([], "x-theme", ""),
        ]
    )
    func normalised(lines: [String], name: String, expected: String) {
        let headers = HTTPHeaders(lines.map { (name, $0) })
        #expect(VaryValue.of(name, in: headers) == expected)
    }

    @Test("a route's vary headers key the same normalised values")
    func routeKeys() throws {
        let router = RequestRouter(configuration: ProxyConfiguration(), queue: nil)
        var policy = ProxyConfiguration.RoutePolicy()
        policy.vary = ["accept-language"]
        let target = try RequestTarget(parsing: "/a")
        let one = router.cacheKey(
            target: target,
            platform: "WEB",
            headers: ["Accept-Language": "en-US, fr"],
            policy: policy
        )
        let two = router.cacheKey(
            target: target,
            platform: "WEB",
            headers: ["Accept-Language": "en-us,fr"],
            policy: policy
        )
        let three = router.cacheKey(
            target: target,
            platform: "WEB",
            headers: ["Accept-Language": "fr,en-us"],
            policy: policy
        )
        #expect(one == two)
        #expect(one != three)
    }
}
