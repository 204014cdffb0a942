import NIOHTTP1
import SDUIProxyCore
import Testing

/// What a shared cache may store, and for how long (RFC 9111 sections 3, 4.2 and 5.2.2), decided directly.
@Suite struct FreshnessPolicyTests {
    private static let now: Int64 = 1_800_000_000

    private static func decide(
        _ code: UInt,
        _ lines: [(String, String)],
        rules: StorageRules = StorageRules(),
        defaultTTL: Int64 = 0,
        request: HTTPHeaders = [:]
    ) -> FreshnessPolicy.Decision {
        FreshnessPolicy.decide(
            requestHeaders: request,
            status: HTTPResponseStatus(statusCode: Int(code)),
            responseFields: HTTPFieldLines(HTTPHeaders(lines)),
            defaultTTL: defaultTTL,
            rules: rules,
            now: now
        )
    }

    private static func stored(_ decision: FreshnessPolicy.Decision) -> Int64? {
        if case .store(let lifetime) = decision { return lifetime }
        return nil
    }

    @Test(
        "RFC 9111 §3: any final status with explicit freshness is stored, registered or not",
        arguments: [200, 201, 299, 302, 400, 403, 500, 503, 599] as [UInt]
    )
    func anyFinalStatus(code: UInt) {
        #expect(Self.stored(Self.decide(code, [("Cache-Control", "max-age=60")])) == 60)
    }

    @Test("RFC 9111 §3: 1xx, 206 and 304 are never stored", arguments: [100, 103, 206, 304] as [UInt])
    func neverStored(code: UInt) {
        #expect(Self.stored(Self.decide(code, [("Cache-Control", "max-age=60"), ("ETag", "\"a\"")])) == nil)
    }

    @Test("RFC 9111 §5.2.2.3: must-understand stores understood statuses despite no-store, and nothing else")
    func mustUnderstand() {
        let directives = [("Cache-Control", "no-store, must-understand, max-age=60")]
        #expect(Self.stored(Self.decide(200, directives)) == 60)
        #expect(Self.stored(Self.decide(404, directives)) == 60)
        #expect(Self.stored(Self.decide(299, directives)) == nil)
        #expect(Self.stored(Self.decide(599, directives)) == nil)
        #expect(Self.stored(Self.decide(200, [("Cache-Control", "no-store, max-age=60")])) == nil)
    }

    @Test("cache.maxErrorTTL caps 4xx and 5xx lifetimes, and only those")
    func errorCap() {
        var rules = StorageRules()
        rules.maxErrorLifetime = 30
        let lines = [("Cache-Control", "max-age=600")]
        #expect(Self.stored(Self.decide(500, lines, rules: rules)) == 30)
        #expect(Self.stored(Self.decide(404, lines, rules: rules)) == 30)
        #expect(Self.stored(Self.decide(200, lines, rules: rules)) == 600)
        #expect(Self.stored(Self.decide(399, lines, rules: rules)) == 600)
        rules.maxErrorLifetime = 0
        #expect(Self.stored(Self.decide(500, lines, rules: rules)) == nil, "capped to nothing, no validator")
    }

    @Test("RFC 9111 §4.2.2: a tenth of the time since Last-Modified, at most an hour, for heuristic statuses")
    func heuristic() {
        func lines(modifiedAgo: Int64, cacheControl: String? = nil) -> [(String, String)] {
            var lines = [
                ("Date", HTTPDate.format(Self.now)), ("Last-Modified", HTTPDate.format(Self.now - modifiedAgo)),
            ]
            if let cacheControl { lines.append(("Cache-Control", cacheControl)) }
            return lines
        }
        #expect(Self.stored(Self.decide(200, lines(modifiedAgo: 1000))) == 100)
        #expect(Self.stored(Self.decide(404, lines(modifiedAgo: 1000))) == 100)
        #expect(Self.stored(Self.decide(200, lines(modifiedAgo: 1_000_000))) == 3600)
        #expect(Self.stored(Self.decide(500, lines(modifiedAgo: 1000))) == nil, "500 is not heuristically cacheable")
        #expect(Self.stored(Self.decide(500, lines(modifiedAgo: 1000, cacheControl: "public"))) == 100)
        #expect(Self.stored(Self.decide(200, lines(modifiedAgo: -10))) == nil, "modified after Date")
        #expect(Self.stored(Self.decide(200, lines(modifiedAgo: 1000, cacheControl: "max-age=5"))) == 5)
        var off = StorageRules()
        off.heuristicMaximum = 0
        #expect(Self.stored(Self.decide(200, lines(modifiedAgo: 1000), rules: off)) == nil)
        var quarter = StorageRules()
        quarter.heuristicFraction = 0.25
        #expect(Self.stored(Self.decide(200, lines(modifiedAgo: 1000), rules: quarter)) == 250)
        // Without Date, the time the response arrived stands in.
        #expect(Self.stored(Self.decide(200, [("Last-Modified", HTTPDate.format(Self.now - 50))])) == 5)
    }

    @Test("the route's defaultTTL applies to 200s with neither explicit nor heuristic freshness")
    func defaultTTL() {
        #expect(Self.stored(Self.decide(200, [], defaultTTL: 30)) == 30)
        #expect(Self.stored(Self.decide(404, [], defaultTTL: 30)) == nil)
        let heuristic = [("Date", HTTPDate.format(Self.now)), ("Last-Modified", HTTPDate.format(Self.now - 100))]
        #expect(Self.stored(Self.decide(200, heuristic, defaultTTL: 30)) == 10)
    }

    @Test("RFC 9111 §5.4: Pragma in a response changes nothing")
    func pragmaIgnored() {
        #expect(Self.stored(Self.decide(200, [("Pragma", "no-cache"), ("Cache-Control", "max-age=60")])) == 60)
        #expect(Self.stored(Self.decide(200, [("Pragma", "no-cache")])) == nil)
    }

    @Test("RFC 9213: a targeted field decides alone; Expires is then not read, Age and Date still are")
    func targeted() {
        #expect(
            Self.stored(Self.decide(200, [("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=600")])) == 600
        )
        #expect(
            Self.stored(Self.decide(200, [("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=1")])) == 1
        )
        #expect(
            Self.stored(Self.decide(200, [("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "private")])) == nil
        )
        let expires = [("Expires", HTTPDate.format(Self.now + 600)), ("Date", HTTPDate.format(Self.now))]
        #expect(Self.stored(Self.decide(200, expires)) == 600)
        #expect(Self.stored(Self.decide(200, expires + [("CDN-Cache-Control", "public")])) == nil)
        #expect(
            Self.stored(Self.decide(200, [("Cache-Control", "max-age=60"), ("CDN-Cache-Control", "max-age =1")])) == 60
        )
    }

    @Test("Set-Cookie: stored under the normal rules, unless cache.storeSetCookie is false")
    func setCookie() {
        let lines = [("Set-Cookie", "a=1"), ("Cache-Control", "max-age=60")]
        #expect(Self.stored(Self.decide(200, lines)) == 60)
        var never = StorageRules()
        never.storesSetCookie = false
        #expect(Self.stored(Self.decide(200, lines, rules: never)) == nil)
        #expect(Self.stored(Self.decide(200, lines + [("Cache-Control", "private")])) == nil)
    }
}
