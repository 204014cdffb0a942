import AsyncHTTPClient
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// RFC 9111 behaviour of the proxy as a shared cache, each rule against a real origin over loopback.
@Suite("RFC 9111 shared-cache semantics")
struct SharedCacheTests {
    private static func origin(
        _ headers: [(String, String)],
        body: String = #"{"_beagleComponent_":"a"}"#
    )
        -> TestOrigin.Responder
    {
        { _ in TestOrigin.Response(status: .ok, headers: [("Content-Type", "application/json")] + headers, body: body) }
    }

    @Test(
        "directive precedence decides what is stored",
        arguments: [
            ([("Cache-Control", "max-age=0, s-maxage=60")], true),
            ([("Cache-Control", "max-age=60, s-maxage=0")], false),
            ([("Cache-Control", "max-age=60"), ("Expires", "Thu, 01 Jan 1970 00:00:00 GMT")], true),
            ([("Expires", HTTPDate.format(HTTPDate.now() + 120)), ("Date", HTTPDate.format(HTTPDate.now()))], true),
            ([("Expires", "Thu, 01 Jan 1970 00:00:00 GMT")], false),
            ([("Expires", "not a date")], false),
            ([("Cache-Control", "max-age=60, max-age=0")], true),
            ([("Cache-Control", "max-age=abc")], false),
            ([("Cache-Control", "public, max-age=60, no-store")], false),
            ([("Cache-Control", "max-age=60, private")], false),
            ([("Cache-Control", "max-age=60"), ("Vary", "*")], false),
        ]
    )
    func precedence(headers: [(String, String)], stored: Bool) async throws {
        try await ProxyHarness.run(origin: Self.origin(headers)) { proxy async throws in
            _ = try await proxy.get("/a")
            let second = try await proxy.get("/a")
            #expect((second["X-Cache"] == "HIT") == stored, "\(headers)")
            #expect(proxy.origin.requestCount == (stored ? 1 : 2))
        }
    }

    @Test(
        "RFC 9111 §5.3: an Expires that is not an HTTP-date exactly as written means already expired",
        arguments: [
            ("Thu, 18 Aug 2050 02:01:18 gMT", true),
            ("Thu, 18 Aug 2050 02:01:18 GMT", true),
            ("Thu, 18 Aug 50 02:01:18 GMT", false),
            ("Thu 18 Aug 2050 02:01:18 GMT", false),
            ("Thu,  18 Aug 2050 02:01:18 GMT", false),
            ("18-Aug-2050", false),
            ("Thu, 18 Aug 2050 2:01:18 GMT", false),
            ("Thu, 18 Aug 2050 02:01:18 UTC", false),
            ("0", false),
        ]
    )
    func expiresMustBeADate(expires: String, stored: Bool) async throws {
        let headers = [("Expires", expires), ("Date", HTTPDate.format(HTTPDate.now()))]
        try await ProxyHarness.run(origin: Self.origin(headers)) { proxy async throws in
            _ = try await proxy.get("/a")
            #expect((try await proxy.get("/a")["X-Cache"] == "HIT") == stored, "Expires: \(expires)")
            #expect(proxy.origin.requestCount == (stored ? 1 : 2))
        }
    }

    @Test(
        "RFC 9111 §5.1: the first member of the first Age line counts",
        arguments: [(["7200, 0"], false), (["0, 7200"], true), (["0", "7200"], true), (["7200", "0"], false)]
    )
    func ageListsAndLines(ages: [String], fresh: Bool) async throws {
        let headers = [("Cache-Control", "max-age=3600")] + ages.map { ("Age", $0) }
        try await ProxyHarness.run(origin: Self.origin(headers)) { proxy async throws in
            _ = try await proxy.get("/a")
            #expect((try await proxy.get("/a")["X-Cache"] == "HIT") == fresh, "Age: \(ages)")
        }
    }

    @Test("RFC 9111 §3: any final status is stored when it carries explicit freshness, and not otherwise")
    func cacheableStatuses() async throws {
        try await ProxyHarness.run(origin: { request in
            switch request.uri {
            case "/gone": TestOrigin.Response(status: .notFound, headers: [("Cache-Control", "max-age=60")], body: "no")
            case "/plain404": TestOrigin.Response(status: .notFound, headers: [], body: "no")
            case "/unregistered":
                TestOrigin.Response(
                    status: .init(statusCode: 599),
                    headers: [("Cache-Control", "max-age=60")],
                    body: "x"
                )
            case "/partial":
                TestOrigin.Response(
                    status: .partialContent,
                    headers: [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-0/2")],
                    body: "x"
                )
            default:
                TestOrigin.Response(status: .internalServerError, headers: [("Cache-Control", "max-age=60")], body: "x")
            }
        }) { proxy async throws in
            for path in ["/gone", "/plain404", "/error", "/unregistered", "/partial"] { _ = try await proxy.get(path) }
            #expect(try await proxy.get("/gone")["X-Cache"] == "HIT")
            #expect(try await proxy.get("/gone").status == .notFound)
            #expect(try await proxy.get("/plain404")["X-Cache"] == "BYPASS")
            let error = try await proxy.get("/error")
            #expect(error["X-Cache"] == "HIT")
            #expect(error.status == .internalServerError)
            let unregistered = try await proxy.get("/unregistered")
            #expect(unregistered["X-Cache"] == "HIT")
            #expect(unregistered.status.code == 599)
            #expect(try await proxy.get("/partial")["X-Cache"] == "BYPASS")
            #expect(proxy.origin.requests(to: "/partial").count == 2)
        }
    }

    @Test("Age counts the Age the backend sent, and an entry older than its lifetime is not served as fresh")
    func ageArithmetic() async throws {
        try await ProxyHarness.run(origin: { request in
            TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=60"),
                    ("Age", request.uri == "/old" ? "100" : "50"),
                ],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            let started = ContinuousClock.now
            _ = try await proxy.get("/young")
            let hit = try await proxy.get("/young")
            // 50 from the backend, plus the whole seconds a loaded machine took between the two (and one for rounding).
            let elapsed = Int((ContinuousClock.now - started).components.seconds)
            #expect(hit["X-Cache"] == "HIT")
            #expect((50...(51 + elapsed)).contains(Int(hit["Age"] ?? "") ?? 0))
            _ = try await proxy.get("/old")
            #expect(try await proxy.get("/old")["X-Cache"] != "HIT")
            #expect(proxy.origin.requests(to: "/old").count == 2)
        }
    }

    @Test("an Expires far in the future is a long lifetime, not a negative one")
    func farFutureExpires() async throws {
        try await ProxyHarness.run(
            origin: Self.origin([("Expires", "Fri, 31 Dec 9999 23:59:59 GMT")])
        ) { proxy async throws in
            #expect(try await proxy.get("/far")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/far")["X-Cache"] == "HIT")
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("a stale entry goes when the backend's answer may not be stored, but not for a client's own no-store")
    func staleEntryDroppedOnlyByTheBackend() async throws {
        let noStoreFor = NIOLockedValueBox<String?>(nil)
        try await ProxyHarness.run(origin: { request in
            let platform = request.headers.first(name: "beagle-platform")
            let cacheControl = platform == noStoreFor.withLockedValue({ $0 }) ? "no-store" : "no-cache"
            return TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("Cache-Control", cacheControl), ("ETag", "\"e\"")],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            // no-cache entries are always stale: each request asks the backend, conditionally while one is kept.
            func asksConditionally(_ platform: String, _ extra: [(String, String)] = []) async throws -> Bool {
                _ = try await proxy.get("/n", headers: [("beagle-platform", platform)] + extra)
                return proxy.origin.requests.last?.headers.first(name: "if-none-match") == "\"e\""
            }
            #expect(try await !asksConditionally("IOS"))
            #expect(try await !asksConditionally("ANDROID"))
            // A client that asks for no-store keeps the answer out of the cache, and takes nothing else out.
            #expect(try await asksConditionally("IOS", [("Cache-Control", "no-store")]))
            #expect(try await asksConditionally("IOS"))
            #expect(try await asksConditionally("ANDROID"))
            // The backend's no-store for IOS drops the IOS entry, and only that one.
            noStoreFor.withLockedValue { $0 = "IOS" }
            #expect(try await asksConditionally("IOS"))
            noStoreFor.withLockedValue { $0 = nil }
            #expect(try await !asksConditionally("IOS"))
            #expect(try await asksConditionally("ANDROID"))
        }
    }

    @Test("conditional requests from clients get a 304 from a fresh entry")
    func clientConditionals() async throws {
        let lastModified = HTTPDate.format(HTTPDate.now() - 3600)
        try await ProxyHarness.run(
            origin: Self.origin([("Cache-Control", "max-age=60"), ("ETag", "\"v1\""), ("Last-Modified", lastModified)])
        ) {
            proxy async throws in
            _ = try await proxy.get("/c")
            let strong = try await proxy.get("/c", headers: [("If-None-Match", "\"v1\"")])
            #expect(strong.status == .notModified)
            #expect(strong.body.isEmpty)
            #expect(strong["ETag"] == "\"v1\"")
            #expect(strong["X-Cache"] == "HIT")
            #expect(try await proxy.get("/c", headers: [("If-None-Match", "\"x\", W/\"v1\"")]).status == .notModified)
            #expect(try await proxy.get("/c", headers: [("If-None-Match", "\"v2\"")]).status == .ok)
            #expect(
                try await proxy.get("/c", headers: [("If-Modified-Since", HTTPDate.format(HTTPDate.now()))]).status
                    == .notModified
            )
            #expect(
                try await proxy.get("/c", headers: [("If-Modified-Since", HTTPDate.format(HTTPDate.now() - 7200))])
                    .status == .ok
            )
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("a stale entry is revalidated upstream; a 304 refreshes it and updates its headers")
    func upstreamRevalidation() async throws {
        try await ProxyHarness.run(origin: { request in
            if request.headers.first(name: "if-none-match") == "\"v1\"" {
                return TestOrigin.Response(
                    status: .notModified,
                    headers: [("Cache-Control", "max-age=60"), ("X-Version", "2")],
                    body: ""
                )
            }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=0"), ("ETag", "\"v1\""),
                    ("X-Version", "1"),
                ],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            let first = try await proxy.get("/r")
            #expect(first["X-Cache"] == "MISS")
            let second = try await proxy.get("/r")
            #expect(second["X-Cache"] == "REVALIDATED")
            #expect(second["X-Version"] == "2")
            #expect(second.body == first.body)
            #expect(proxy.origin.requests.last?.headers.first(name: "if-none-match") == "\"v1\"")
            let third = try await proxy.get("/r")
            #expect(third["X-Cache"] == "HIT")
            #expect(third["Cache-Control"] == "max-age=60")
            #expect(proxy.origin.requestCount == 2)
            let stats = try await proxy.admin("/cache/stats")
            #expect(stats.body.contains(#""revalidations":1"#))
        }
    }

    @Test("a 304 without a Date dates the refreshed entry now, so it is fresh for the 304's max-age")
    func revalidationWithoutDate() async throws {
        let tenMinutesAgo = HTTPDate.format(HTTPDate.now() - 600)
        try await ProxyHarness.run(origin: { request in
            if request.headers.first(name: "if-none-match") == "\"v1\"" {
                return TestOrigin.Response(status: .notModified, headers: [("Cache-Control", "max-age=60")])
            }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Date", tenMinutesAgo), ("Cache-Control", "max-age=1"),
                    ("ETag", "\"v1\""),
                ],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            #expect(try await proxy.get("/r")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/r")["X-Cache"] == "REVALIDATED")
            let refreshed = try await proxy.get("/r")
            #expect(refreshed["X-Cache"] == "HIT")
            let date = try #require(refreshed["Date"].flatMap { HTTPDate.parse($0) })
            #expect(abs(date - HTTPDate.now()) < 60)
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("a 304's headers replace the entry's as sent: values with commas are not split into lines")
    func revalidationKeepsValuesWhole() async throws {
        try await ProxyHarness.run(origin: { request in
            if request.headers.first(name: "if-modified-since") != nil {
                return TestOrigin.Response(
                    status: .notModified,
                    headers: [
                        ("Cache-Control", "public, max-age=60"), ("Expires", "Sun, 22 Nov 2026 09:00:00 GMT"),
                        ("ETag", "\"new\""),
                    ],
                    body: ""
                )
            }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=0"),
                    ("Last-Modified", "Sun, 22 Nov 2026 03:00:00 GMT"), ("Expires", "Sun, 22 Nov 2026 04:00:00 GMT"),
                ],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            #expect(try await proxy.get("/m")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/m")["X-Cache"] == "REVALIDATED")
            let hit = try await proxy.get("/m")
            #expect(hit["X-Cache"] == "HIT")
            #expect(hit.headers["Expires"] == ["Sun, 22 Nov 2026 09:00:00 GMT"])
            #expect(hit.headers["Cache-Control"] == ["public, max-age=60"])
            #expect(hit.headers["Last-Modified"] == ["Sun, 22 Nov 2026 03:00:00 GMT"])
            // The backend's validator from the 304 is kept, not replaced by one the proxy computes.
            #expect(hit.headers["ETag"] == ["\"new\""])
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("a stale entry answered with a new 200 is replaced")
    func revalidationReplaced() async throws {
        let version = NIOLockedValueBox(1)
        try await ProxyHarness.run(origin: { _ in
            let current = version.withLockedValue { $0 }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=0"), ("ETag", "\"v\(current)\""),
                ],
                body: #"{"_beagleComponent_":"a","v":\#(current)}"#
            )
        }) { proxy async throws in
            _ = try await proxy.get("/r")
            version.withLockedValue { $0 = 2 }
            let replaced = try await proxy.get("/r")
            #expect(replaced["X-Cache"] == "MISS")
            #expect(replaced.body.contains(#""v":2"#))
            #expect(replaced["ETag"] == "\"v2\"")
        }
    }

    /// A response head's lines after the status line, with `Age` (which moves with the clock) left out.
    /// The head's field lines but `Age`, with `Cache-Status`'s ttl written as `<left>` (it counts down).
    private static func lines(of head: String) -> [String] {
        head.components(separatedBy: "\r\n").dropFirst().filter { !$0.isEmpty && !$0.hasPrefix("Age: ") }.map {
            $0.hasPrefix("Cache-Status: ") ? CacheStatusText.withTTLLeftOut($0) : $0
        }
    }

    @Test(
        "the heads of a hit, a 304 and their Beagle 1.x forms, line by line",
        arguments: [false, true]
    )
    func presentedHeads(beagle: Bool) async throws {
        let headers = [
            ("Content-Type", "application/json"), ("Cache-Control", "public, max-age=60"), ("ETag", "\"v1\""),
            ("X-Other", "kept, on 200s only"), ("Expires", "Sun, 22 Nov 2099 09:00:00 GMT"), ("Vary", "Accept"),
        ]
        try await ProxyHarness.run(
            origin: { _ in TestOrigin.Response(headers: headers, body: #"{"_beagleComponent_":"a"}"#) },
            configure: { $0.compat.beagleHash = beagle }
        ) { proxy async throws in
            let started = ContinuousClock.now
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("GET /h HTTP/1.1\r\nHost: x\r\nAccept: a\r\n\r\n")
            _ = try await connection.readResponse()
            try await connection.send("GET /h HTTP/1.1\r\nHost: x\r\nAccept: a\r\n\r\n")
            let hit = try #require(try await connection.readResponse())
            let hash = hit.head.components(separatedBy: "\r\n").first { $0.hasPrefix("beagle-hash: ") }
            let condition = beagle ? (hash ?? "beagle-hash: none") : "If-None-Match: \"v1\""
            try await connection.send("GET /h HTTP/1.1\r\nHost: x\r\nAccept: a\r\n\(condition)\r\n\r\n")
            let notModified = try #require(try await connection.readResponse(bodyless: true))
            let elapsedSeconds = Int((ContinuousClock.now - started).components.seconds)
            await connection.close()

            #expect(hit.head.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(notModified.head.hasPrefix("HTTP/1.1 304 Not Modified\r\n"))
            let length = "Content-Length: \(#"{"_beagleComponent_":"a"}"#.utf8.count)"
            // The backend's Vary, with the platform the key holds, and Accept-Encoding: JSON may be kept compressed.
            let vary = "Vary: Accept, beagle-platform, Accept-Encoding"
            if beagle {
                // Each max-age is what is left of 60 seconds, in whole seconds, however long this machine took
                // to get there; the lines are compared with it written as "<left>".
                let prefix = "Cache-Control: max-age="
                let leftOf60 = { (head: String) -> [String] in
                    Self.lines(of: head).map { line in
                        guard line.hasPrefix(prefix) else { return line }
                        #expect(Int(line.dropFirst(prefix.count)).map { (59 - elapsedSeconds)...60 ~= $0 } == true)
                        return prefix + "<left>"
                    }
                }
                let maxAge = prefix + "<left>"
                #expect(
                    leftOf60(hit.head) == [
                        "Accept-Ranges: bytes", "Content-Type: application/json", "X-Other: kept, on 200s only",
                        vary, "Expires: Sun, 22 Nov 2099 09:00:00 GMT", "ETag: \"v1\"", "Via: 1.1 sdui-proxy", length,
                        maxAge, hash!,
                        "X-Cache: HIT", "Cache-Status: sdui-proxy; hit; ttl=<left>",
                    ]
                )
                #expect(
                    leftOf60(notModified.head) == [
                        vary, "Expires: Sun, 22 Nov 2099 09:00:00 GMT", "ETag: \"v1\"", maxAge, hash!,
                        "X-Cache: HIT", "Cache-Status: sdui-proxy; hit; ttl=<left>",
                    ]
                )
            } else {
                #expect(
                    Self.lines(of: hit.head) == [
                        "Accept-Ranges: bytes", "Content-Type: application/json", "Cache-Control: public, max-age=60",
                        "X-Other: kept, on 200s only", vary, "Expires: Sun, 22 Nov 2099 09:00:00 GMT",
                        "ETag: \"v1\"", "Via: 1.1 sdui-proxy", length,
                        "X-Cache: HIT", "Cache-Status: sdui-proxy; hit; ttl=<left>",
                    ]
                )
                #expect(
                    Self.lines(of: notModified.head) == [
                        "Cache-Control: public, max-age=60", vary, "Expires: Sun, 22 Nov 2099 09:00:00 GMT",
                        "ETag: \"v1\"", "X-Cache: HIT", "Cache-Status: sdui-proxy; hit; ttl=<left>",
                    ]
                )
            }
        }
    }

    @Test("Beagle 1.x: beagle-hash and a plain max-age, and a 304 only for a matching hash")
    func beagleHash() async throws {
        try await ProxyHarness.run(
            origin: Self.origin([("Cache-Control", "public, max-age=60, stale-while-revalidate=5")]),
            configure: { $0.compat.beagleHash = true }
        ) { proxy async throws in
            let first = try await proxy.get("/screen")
            let hash = try #require(first["beagle-hash"])
            #expect(first["Cache-Control"]?.hasPrefix("max-age=") == true)
            #expect(first["Cache-Control"]?.contains(",") == false)
            let matching = try await proxy.get("/screen", headers: [("beagle-hash", hash)])
            #expect(matching.status == .notModified)
            #expect(matching.body.isEmpty)
            #expect(matching["beagle-hash"] == hash)
            #expect(matching["Cache-Control"]?.hasPrefix("max-age=") == true)
            #expect(try await proxy.get("/screen", headers: [("beagle-hash", "0000")]).status == .ok)
            let noHash = try await proxy.get("/screen", headers: [("If-None-Match", first["ETag"] ?? "")])
            #expect(noHash.status == .ok)
        }
    }

    @Test("stale-while-revalidate serves the stale entry and refreshes it once in the background")
    func staleWhileRevalidate() async throws {
        let version = NIOLockedValueBox(1)
        try await ProxyHarness.run(origin: { _ in
            let current = version.withLockedValue { $0 }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Age", "5"),
                    ("Cache-Control", current == 1 ? "max-age=1, stale-while-revalidate=60" : "max-age=60"),
                ],
                body: #"{"_beagleComponent_":"a","v":\#(current)}"#
            )
        }) { proxy async throws in
            _ = try await proxy.get("/s")
            version.withLockedValue { $0 = 2 }
            let stale = try await proxy.get("/s")
            #expect(stale["X-Cache"] == "STALE")
            #expect(stale.body.contains(#""v":1"#))
            try await waitUntil { proxy.origin.requestCount == 2 }
            // The refresh is stored once its response has arrived; until then the stale entry is served.
            try await waitUntil { try await proxy.get("/s")["X-Cache"] == "HIT" }
            let refreshed = try await proxy.get("/s")
            #expect(refreshed["X-Cache"] == "HIT")
            #expect(refreshed.body.contains(#""v":2"#))
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("stale-if-error serves the stale entry when the backend is down")
    func staleIfError() async throws {
        try await ProxyHarness.run(
            origin: Self.origin([("Age", "5"), ("Cache-Control", "max-age=1, stale-if-error=60")])
        ) {
            proxy async throws in
            _ = try await proxy.get("/e")
            try await proxy.origin.stop()
            let stale = try await proxy.get("/e")
            #expect(stale.status == .ok)
            #expect(stale["X-Cache"] == "STALE")
            try await proxy.origin.restart()
        }
    }

    @Test(
        "the configured staleIfError covers 5xx answers; must-revalidate forbids serving stale, s-maxage the configured window"
    )
    func configuredStaleIfError() async throws {
        let failing = NIOLockedValueBox(false)
        try await ProxyHarness.run(
            origin: { request in
                if failing.withLockedValue({ $0 }) {
                    return TestOrigin.Response(status: .serviceUnavailable, body: "down")
                }
                let cacheControl =
                    switch request.uri {
                    case "/strict": "max-age=1, must-revalidate"
                    case "/shared": "s-maxage=1"
                    case "/shared-asking": "s-maxage=1, stale-if-error=60"
                    default: "max-age=1"
                    }
                return TestOrigin.Response(
                    headers: [("Content-Type", "application/json"), ("Age", "5"), ("Cache-Control", cacheControl)],
                    body: #"{"_beagleComponent_":"a"}"#
                )
            },
            configure: { $0.cache.policy.staleIfError = .seconds(300) }
        ) { proxy async throws in
            for path in ["/lenient", "/strict", "/shared", "/shared-asking"] { _ = try await proxy.get(path) }
            failing.withLockedValue { $0 = true }
            let lenient = try await proxy.get("/lenient")
            #expect(lenient.status == .ok)
            #expect(lenient["X-Cache"] == "STALE")
            #expect(try await proxy.get("/strict").status == .serviceUnavailable)
            // s-maxage forbids the route's stale window, but not one the response asks for itself.
            #expect(try await proxy.get("/shared").status == .serviceUnavailable)
            #expect(try await proxy.get("/shared-asking")["X-Cache"] == "STALE")
            let stats = try await proxy.admin("/cache/stats")
            #expect(stats.body.contains(#""staleServes":2"#))
        }
    }

    @Test("hundreds of concurrent cold requests send one request upstream")
    func coalescing() async throws {
        try await ProxyHarness.run(
            origin: { _ in
                var response = TestOrigin.Response.component()
                response.delay = .milliseconds(1500)
                return response
            },
            configure: { $0.upstream.timeout = .seconds(10) }
        ) { proxy async throws in
            let replies = try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<300 { group.addTask { try await proxy.get("/cold") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.count == 300)
            #expect(replies.allSatisfy { $0.status == .ok && $0.body.contains("beagle:screenComponent") })
            #expect(proxy.origin.requestCount == 1)
            let stats = try await proxy.admin("/cache/stats")
            #expect(stats.body.contains(#""coalescedWaits":"#))
            #expect(!stats.body.contains(#""coalescedWaits":0"#))
        }
    }

    @Test("one origin failure is fanned out to every waiter")
    func coalescedFailure() async throws {
        // The answer is held until every request waits behind the first: a 503 is not stored, so one that came
        // after it would fetch again.
        let gate = OriginGate()
        try await ProxyHarness.run(
            origin: { _ in
                TestOrigin.Response(
                    status: .serviceUnavailable,
                    headers: [("Content-Type", "text/plain")],
                    body: "overloaded",
                    heldBy: gate
                )
            },
            configure: { $0.upstream.timeout = .seconds(60) }
        ) { proxy async throws in
            let replies = try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<200 { group.addTask { try await proxy.get("/failing") } }
                // Within the harness's ten seconds for a request.
                try await waitUntil(timeout: .seconds(8)) {
                    proxy.server.context.fetcher.coalescer.coalescedWaits >= 199
                }
                gate.open()
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.allSatisfy { $0.status == .serviceUnavailable && $0.body == "overloaded" })
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("waiters do not take an answer meant for one client: each fetches its own")
    func coalescedPrivateAnswer() async throws {
        // The first answer is held until another request waits behind it.
        let gate = OriginGate()
        try await ProxyHarness.run(
            origin: { _ in
                var response = TestOrigin.Response.component()
                response.headers = [("Content-Type", "application/json"), ("Cache-Control", "private, max-age=60")]
                response.heldBy = gate
                return response
            }
        ) { proxy async throws in
            let replies = try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<20 { group.addTask { try await proxy.get("/mine") } }
                try await waitUntil(timeout: .seconds(8)) {
                    proxy.server.context.fetcher.coalescer.coalescedWaits >= 1
                }
                gate.open()
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.allSatisfy { $0.status == .ok && $0.body.contains("beagle:screenComponent") })
            #expect(proxy.origin.requestCount == 20)
            let stats = try await proxy.admin("/cache/stats")
            #expect(!stats.body.contains(#""coalescedWaits":0"#))
        }
    }

    @Test(
        "a waiter whose own variant has a stale-if-error entry gets it when the backend fails the leader",
        arguments: [false, true]
    )
    func coalescedWaiterServesItsOwnStaleEntry(leaderHasStaleEntry: Bool) async throws {
        let gate = OriginGate()
        let failing = NIOLockedValueBox(false)
        try await ProxyHarness.run(
            origin: { request in
                if failing.withLockedValue({ $0 }) {
                    return TestOrigin.Response(status: .serviceUnavailable, body: "down", heldBy: gate)
                }
                let tier = request.headers.first(name: "x-tier") ?? "none"
                return TestOrigin.Response(
                    headers: [
                        ("Content-Type", "application/json"), ("Age", "5"), ("Vary", "X-Tier"),
                        ("Cache-Control", "max-age=1, stale-if-error=60"),
                    ],
                    body: #"{"_beagleComponent_":"a","tier":"\#(tier)"}"#
                )
            }
        ) { proxy async throws in
            let stored = leaderHasStaleEntry ? ["gold", "free"] : ["gold"]
            for tier in stored { _ = try await proxy.get("/home", headers: [("X-Tier", tier)]) }
            failing.withLockedValue { $0 = true }
            // The free user's request leads (a miss, or its own stale entry); the gold user's joins it.
            async let free = proxy.get("/home", headers: [("X-Tier", "free")])
            try await waitUntil { proxy.origin.requestCount == stored.count + 1 }
            async let gold = proxy.get("/home", headers: [("X-Tier", "gold")])
            try await Self.waitForCoalescedWaits(1, proxy)
            gate.open()
            let freeReply = try await free
            #expect(leaderHasStaleEntry ? freeReply["X-Cache"] == "STALE" : freeReply.status == .serviceUnavailable)
            let goldReply = try await gold
            #expect(goldReply.status == .ok)
            #expect(goldReply["X-Cache"] == "STALE")
            #expect(goldReply.body.contains(#""tier":"gold""#))
            // The failing backend was asked once, by the leader.
            #expect(proxy.origin.requestCount == stored.count + 1)
        }
    }

    @Test("a 401 answered to one client's credentials is not handed to a waiter with a cookie of its own")
    func coalescedAuthenticationFailure() async throws {
        let gate = OriginGate()
        try await ProxyHarness.run(
            origin: { request in
                guard request.headers.first(name: "cookie") == "session=valid" else {
                    return TestOrigin.Response(status: .unauthorized, body: "sign in", heldBy: gate)
                }
                return .component(maxAge: nil, heldBy: gate).withHeader("Cache-Control", "private")
            }
        ) { proxy async throws in
            async let anonymous = proxy.get("/account")
            try await waitUntil { proxy.origin.requestCount == 1 }
            async let signedIn = proxy.get("/account", headers: [("Cookie", "session=valid")])
            try await Self.waitForCoalescedWaits(1, proxy)
            gate.open()
            #expect(try await anonymous.status == .unauthorized)
            #expect(try await signedIn.status == .ok)
            #expect(proxy.origin.requestCount == 2)
        }
    }

    /// Waits until `count` requests have joined a fetch in flight.
    private static func waitForCoalescedWaits(_ count: Int, _ proxy: ProxyHarness) async throws {
        try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""coalescedWaits":\#(count)"#) }
    }

    @Test("requests with Authorization are stored only when the response allows it")
    func authorizationAndPublic() async throws {
        try await ProxyHarness.run(origin: { request in
            TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"),
                    ("Cache-Control", request.uri == "/public" ? "public, max-age=60" : "max-age=60"),
                ],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            let credentials = [("Authorization", "Bearer t")]
            #expect(try await proxy.get("/public", headers: credentials)["X-Cache"] == "MISS")
            #expect(try await proxy.get("/public")["X-Cache"] == "HIT")
            #expect(try await proxy.get("/private", headers: credentials)["X-Cache"] == "BYPASS")
            #expect(try await proxy.get("/private")["X-Cache"] == "MISS")
        }
    }

    @Test("a successful unsafe request invalidates its target and its same-origin Location")
    func unsafeMethodInvalidation() async throws {
        try await ProxyHarness.run(origin: { request in
            if request.method == .POST {
                return TestOrigin.Response(status: .created, headers: [("Location", "/orders/7")], body: "")
            }
            if request.method == .DELETE { return TestOrigin.Response(status: .notFound, body: "") }
            return .component()
        }) { proxy async throws in
            for path in ["/orders", "/orders/7", "/orders/8"] { _ = try await proxy.get(path) }
            _ = try await proxy.get("/orders", method: .POST, body: "{}")
            #expect(try await proxy.get("/orders")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/orders/7")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/orders/8")["X-Cache"] == "HIT")
            _ = try await proxy.get("/orders/8", method: .DELETE)
            #expect(try await proxy.get("/orders/8")["X-Cache"] == "HIT", "a failed DELETE invalidates nothing")
        }
    }

    @Test("admin purge by url, prefix, tag and everything")
    func purge() async throws {
        try await ProxyHarness.run(origin: { request in
            var response = TestOrigin.Response.component()
            response.headers.append(("Surrogate-Key", request.uri.hasPrefix("/screens/") ? "screens all" : "all"))
            return response
        }) { proxy async throws in
            for path in ["/a", "/screens/1", "/screens/2", "/other"] { _ = try await proxy.get(path) }
            _ = try await proxy.get("/a", headers: [("beagle-platform", "IOS")])

            let byURL = try await proxy.admin("/cache?url=/a", method: .DELETE)
            #expect(byURL.body == #"{"purged":2,"inFlight":0,"url":"/a"}"#)
            #expect(try await proxy.get("/a")["X-Cache"] == "MISS")

            let byTag = try await proxy.admin("/cache?tag=screens", method: .DELETE)
            #expect(byTag.body.contains(#""purged":2"#))
            #expect(try await proxy.get("/screens/1")["X-Cache"] == "MISS")

            // The prefix is normalised as request targets are: this one is /screens/.
            let byPrefix = try await proxy.admin("/cache?prefix=/x/../%2573creens/", method: .DELETE)
            #expect(byPrefix.body == #"{"purged":1,"inFlight":0,"prefix":"/screens/"}"#)

            let everything = try await proxy.admin("/cache", method: .DELETE)
            #expect(everything.body.contains(#""purged":2"#))
            #expect(everything.body.contains(#""all":true"#))
            #expect(try await proxy.get("/other")["X-Cache"] == "MISS")

            // url= takes the rest of the query, so it cannot be followed by another parameter; preceded, it is
            // one parameter too many.
            #expect(try await proxy.admin("/cache?tag=x&url=/a", method: .DELETE).status == .badRequest)
            let stats = try await proxy.admin("/cache/stats")
            for field in [
                "entries", "bytes", "hits", "misses", "staleServes", "revalidations", "coalescedWaits", "evictions",
            ] {
                #expect(stats.body.contains(#""\#(field)":"#))
            }
        }
    }

    @Test("methods the proxy does not cache pass through on any path, even a cached one")
    func passThroughOnCachedPath() async throws {
        try await ProxyHarness.run { proxy async throws in
            _ = try await proxy.get("/screens/home")
            let options = try await proxy.get("/screens/home", method: .OPTIONS)
            #expect(options["X-Cache"] == nil)
            #expect(proxy.origin.requests.map(\.method) == [.GET, .OPTIONS])
        }
    }
}

/// Polls `condition` until it holds, for at most `timeout` (generous: a condition that holds ends the wait at once).
func waitUntil(timeout: Duration = .seconds(10), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("condition not met in time")
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}
