import NIOHTTP1
import SDUIProxyCore
import Testing

/// The request values a variant is selected by (RFC 9111 section 4.1), normalised: `Accept-Language` as the
/// preference it states, other fields never reordered.
@Suite struct VaryValueTests {
    @Test(
        "lines become one list; whitespace and empty members go; case only where values ignore it",
        arguments: [
            (["en-US , fr"], "accept-language", "en-us,fr"),
            (["en-US", " fr\t"], "accept-language", "en-us,fr"),
            (["fr,en-US"], "accept-language", "en-us,fr"),
            (["en;q=0.5, fr;q=1"], "accept-language", "fr,en;q=0.5"),
            (["de;q=0.50, en ; q=1.000,fr"], "accept-language", "en,fr,de;q=0.5"),
            (["*;q=0, en;q=0.001"], "accept-language", "en;q=0.001,*;q=0"),
            (["en;q=2"], "accept-language", "en;q=2"),
            (["en;level=1"], "accept-language", "en;level=1"),
            (["b, a"], "x-theme", "b,a"),
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
            headers: ["Accept-Language": "fr;q=0.9,en-us"],
            policy: policy
        )
        #expect(one == two)
        // Another preference: fr weighs less here.
        #expect(one != three)
    }

    @Test("RFC 9110 §12.5.4: languages of equal weight in any order, and weights however written, are one variant")
    func languageOrderIgnored() {
        func value(_ text: String) -> String { VaryValue.of("accept-language", in: ["Accept-Language": text]) }
        #expect(value("en, fr") == value("fr, en"))
        #expect(value("fr;q=0.5, de;q=1.0") == value("de, fr;q=0.500"))
        #expect(value("en, fr;q=0.5") != value("fr, en;q=0.5"))
    }
}
