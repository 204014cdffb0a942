import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("Cache-Control directives")
struct CacheControlTests {
    private func directives(_ lines: String...) -> CacheControl {
        CacheControl(headers: HTTPHeaders(lines.map { ("Cache-Control", $0) }))
    }

    @Test("every directive the cache reads, in any letter case, with and without spaces")
    func allDirectives() {
        let parsed = directives(
            "No-Store, NO-CACHE,private , public,must-revalidate,proxy-revalidate, no-transform, only-if-cached",
            "MAX-AGE=60, s-maxage = 30, stale-while-revalidate=5,stale-if-error=7,max-stale=9,min-fresh=3"
        )
        #expect(parsed.noStore && parsed.noCache && parsed.isPrivate && parsed.isPublic)
        #expect(parsed.mustRevalidate && parsed.proxyRevalidate && parsed.noTransform && parsed.onlyIfCached)
        #expect(parsed.maxAge == 60 && parsed.sharedMaxAge == 30)
        #expect(parsed.staleWhileRevalidate == 5 && parsed.staleIfError == 7)
        #expect(parsed.maxStale == 9 && parsed.minFresh == 3)
        #expect(parsed.hasExplicitLifetime)
    }

    @Test("nothing set without the header, and unknown directives are ignored")
    func absentAndUnknown() {
        #expect(CacheControl(headers: HTTPHeaders([("Content-Type", "application/json")])) == CacheControl())
        #expect(directives("community=\"UCI\", x-ext, , ,") == CacheControl())
        #expect(!directives("").hasExplicitLifetime)
    }

    @Test("the first occurrence of a directive with an argument counts, across field lines")
    func firstOccurrence() {
        #expect(directives("max-age=10, max-age=20").maxAge == 10)
        #expect(directives("max-age=10", "max-age=20").maxAge == 10)
        #expect(directives("s-maxage=1", "s-maxage=2, max-age=3").sharedMaxAge == 1)
    }

    @Test("quoted arguments are unquoted, and commas inside quotes do not split directives")
    func quotes() {
        #expect(directives(#"max-age="120""#).maxAge == 120)
        let parsed = directives(#"no-cache="set-cookie, x-a", max-age=5"#)
        #expect(parsed.noCache)
        #expect(parsed.maxAge == 5)
        #expect(directives(#"private="x, max-age=9""#).maxAge == nil)
    }

    @Test("a bad delta-seconds counts as 0; a huge one is capped; max-stale alone means any staleness")
    func deltaSeconds() {
        #expect(directives("max-age=abc").maxAge == 0)
        #expect(directives("max-age=").maxAge == 0)
        #expect(directives("max-age").maxAge == 0)
        #expect(directives("max-age=-5").maxAge == 0)
        #expect(directives("max-age=1.5").maxAge == 0)
        #expect(directives("max-age=99999999999").maxAge == CacheControl.maximumDeltaSeconds)
        #expect(directives("max-age=2147483649").maxAge == CacheControl.maximumDeltaSeconds)
        #expect(directives("max-age=0000000042").maxAge == 42)
        #expect(directives("max-stale").maxStale == CacheControl.maximumDeltaSeconds)
    }

    @Test("a directive name with spaces inside or other bytes is not a directive")
    func oddNames() {
        #expect(!directives("no store").noStore)
        #expect(!directives("no-storé").noStore)
        #expect(directives("max-age =\t7").maxAge == 7)
    }

    @Test(
        "RFC 9111 §5.1: Age is the first member of the first line, digits only, or nothing",
        arguments: [
            (["7200, 0"], 7200 as Int64?),
            (["0, 7200"], 0),
            (["  42 "], 42),
            (["5", "9000"], 5),
            (["+5"], nil),
            (["-5"], nil),
            (["5.0"], nil),
            (["five"], nil),
            ([""], nil),
            (["99999999999999999999"], CacheControl.maximumDeltaSeconds),
        ] as [([String], Int64?)]
    )
    func ageField(lines: [String], seconds: Int64?) {
        var headers = HTTPHeaders()
        for line in lines { headers.add(name: "Age", value: line) }
        let now = HTTPDate.now()
        headers.add(name: "Date", value: HTTPDate.format(now))
        let age = FreshnessPolicy.initialAge(fields: HTTPFieldLines(headers), requestTime: now, responseTime: now)
        #expect(age == (seconds ?? 0), "\(lines)")
        #expect(FreshnessPolicy.ageSeconds(lines[0]) == seconds, "\(lines)")
    }
}
