import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Prefetch and warm-up over loopback")
struct PrefetchTests {
    /// An origin that serves JSON files from a directory, like a component backend.
    static func files(in directory: URL, maxAge: Int = 60) -> TestOrigin.Responder {
        { request in
            let path = request.uri.split(separator: "?").first.map(String.init) ?? "/"
            for candidate in [path, path + ".json"] {
                let file = directory.appendingPathComponent(String(candidate.dropFirst()))
                if let data = FileManager.default.contents(atPath: file.path) {
                    return TestOrigin.Response(
                        headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=\(maxAge)")],
                        body: String(decoding: data, as: UTF8.self)
                    )
                }
            }
            return TestOrigin.Response(status: .notFound, headers: [("Content-Type", "text/plain")], body: "not found")
        }
    }

    static let samples = ProcessTests.repositoryRoot.appendingPathComponent("config/samples")
    /// The Beagle fixtures the core tests plan (`SDUIProxyCoreTests/Fixtures.swift` lists them).
    static let fixtures = ProcessTests.repositoryRoot.appendingPathComponent("Tests/Fixtures/beagle")

    /// What ``settle(_:)`` prefetches.
    static let settledTarget = "/settled"

    /// Waits until every prefetch asked for so far has ended, with `prefetch.concurrency` 1: prefetches then run one
    /// at a time in the order asked, so one asked for now starts only after all of them. A stored component asks
    /// for its navigation targets before it is answered and before its own prefetch ends, so once the components
    /// of interest are stored, no target of theirs can be fetched after this returns. It fetches
    /// ``settledTarget`` from the origin.
    static func settle(_ proxy: ProxyHarness) async throws {
        _ = try await proxy.server.prefetcher.prefetch(target: settledTarget, platform: "WEB", followActions: 0).get()
    }

    /// The targets the origin was asked for, less ``settledTarget``.
    static func fetched(_ proxy: ProxyHarness) -> [String] {
        proxy.origin.requests.map(\.uri).filter { $0 != settledTarget }
    }

    static func component(linkingTo urls: [String], extra: String = "") -> TestOrigin.Response {
        let actions = urls.map {
            #"{"_beagleAction_":"beagle:pushView","route":{"url":"\#($0)","shouldPrefetch":true}}"#
        }
        return TestOrigin.Response(
            headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")],
            body:
                #"{"_beagleComponent_":"beagle:screenComponent","onPress":[\#(actions.joined(separator: ","))]\#(extra)}"#
        )
    }

    @Test("declared URLs are fetched at start-up for every platform; /ready says 503 until then, and hits follow")
    func warmUp() async throws {
        // Holds /slow until the test has seen the proxy not ready: a delay could end first on a loaded machine.
        let slow = OriginGate()
        try await ProxyHarness.run(
            origin: { request in
                var response = TestOrigin.Response.component()
                if request.uri == "/slow" { response.heldBy = slow }
                if request.uri == "/missing" { response = TestOrigin.Response(status: .notFound, body: "") }
                return response
            },
            configure: {
                $0.prefetch.urls = ["/screens/home", "/slow", "/missing"]
                $0.prefetch.platforms = ["IOS", "ANDROID"]
            }
        ) { proxy async throws in
            let early = try await proxy.admin("/ready")
            #expect(early.status == .serviceUnavailable)
            #expect(early.body.contains(#""total":6"#))
            slow.open()
            try await waitUntil { try await proxy.admin("/ready").status == .ok }
            let ready = try await proxy.admin("/ready")
            #expect(ready.body == #"{"ready":true,"done":6,"total":6,"failed":2}"#)

            let before = proxy.origin.requestCount
            #expect(before == 6)
            for platform in ["IOS", "ANDROID"] {
                #expect(
                    try await proxy.get("/screens/home", headers: [("beagle-platform", platform)])["X-Cache"] == "HIT"
                )
                #expect(try await proxy.get("/slow", headers: [("beagle-platform", platform)])["X-Cache"] == "HIT")
            }
            #expect(proxy.origin.requestCount == before)
            let platforms = Set(proxy.origin.requests.compactMap { $0.headers.first(name: "beagle-platform") })
            #expect(platforms == ["IOS", "ANDROID"])
        }
    }

    @Test("readyWhen succeeded: /ready is 503 with the failed count until a retry fetches the failed URL, then 200")
    func readyWhenSucceeded() async throws {
        let backendUp = NIOLockedValueBox(false)
        let retries = ManualScheduler()
        var tuning = ProxyServer.Tuning()
        tuning.warmUpScheduler = retries.scheduler
        try await ProxyHarness.run(
            origin: { request in
                guard request.uri == "/flaky", !backendUp.withLockedValue({ $0 }) else { return .component() }
                return TestOrigin.Response(status: .serviceUnavailable, body: "down")
            },
            configure: {
                $0.prefetch.urls = ["/steady", "/flaky"]
                $0.prefetch.platforms = ["WEB"]
                $0.prefetch.readyWhen = .succeeded
            },
            tuning: tuning
        ) { proxy async throws in
            // Both first fetches end, in either order; the failed one's retry is scheduled as its failure is recorded.
            let failing = #"{"ready":false,"done":2,"total":2,"failed":1}"#
            try await waitUntil { try await proxy.admin("/ready").body == failing }
            try await waitUntil { retries.pendingDelays.count == 1 }
            let delay = try #require(retries.pendingDelays.first)
            #expect(delay >= .milliseconds(500) && delay <= .seconds(1))
            let notReady = try await proxy.admin("/ready")
            #expect(notReady.status == .serviceUnavailable)
            #expect(notReady.body == failing)

            // Still down: the retry fails, and the next one waits longer.
            retries.fireAll()
            try await waitUntil { proxy.origin.requests(to: "/flaky").count == 2 && retries.pendingDelays.count == 1 }
            #expect(try await proxy.admin("/ready").status == .serviceUnavailable)
            let second = try #require(retries.pendingDelays.first)
            #expect(second >= .seconds(1) && second <= .seconds(2))

            backendUp.withLockedValue { $0 = true }
            retries.fireAll()
            try await waitUntil { try await proxy.admin("/ready").status == .ok }
            #expect(try await proxy.admin("/ready").body == #"{"ready":true,"done":2,"total":2,"failed":0}"#)
            #expect(try await proxy.get("/flaky")["X-Cache"] == "HIT")
            // Fetched once: nothing more is scheduled.
            #expect(retries.pendingDelays.isEmpty)
            #expect(proxy.origin.requests(to: "/steady").count == 1)
        }
    }

    @Test("readyWhen finished (the default): ready once tried, with the failures counted, and nothing retried")
    func readyWhenFinished() async throws {
        let retries = ManualScheduler()
        var tuning = ProxyServer.Tuning()
        tuning.warmUpScheduler = retries.scheduler
        try await ProxyHarness.run(
            origin: { request in
                request.uri == "/flaky" ? TestOrigin.Response(status: .serviceUnavailable, body: "down") : .component()
            },
            configure: {
                $0.prefetch.urls = ["/steady", "/flaky"]
                $0.prefetch.platforms = ["WEB"]
            },
            tuning: tuning
        ) { proxy async throws in
            try await waitUntil { try await proxy.admin("/ready").status == .ok }
            #expect(try await proxy.admin("/ready").body == #"{"ready":true,"done":2,"total":2,"failed":1}"#)
            #expect(retries.pendingDelays.isEmpty)
        }
    }

    @Test("a reload with new declared URLs keeps a warm proxy ready, though no probe saw the first warm-up end")
    func readinessAcrossReload() async throws {
        let gate = OriginGate()
        let collector = LineCollector()
        let logger = Logger(label: "test") { label in
            LoggingBootstrap.makeHandler(label: label, format: .json, level: .info, sink: collector.sink)
        }
        try await ProxyHarness.run(
            origin: { request in request.uri == "/later" ? .component(heldBy: gate) : .component() },
            configure: {
                $0.prefetch.urls = ["/first"]
                $0.prefetch.platforms = ["WEB"]
            },
            logger: logger
        ) { proxy async throws in
            try await waitUntil { try await proxy.get("/first")["X-Cache"] == "HIT" }
            // The warm-up has seen its one fetch end; no probe asks meanwhile.
            try await waitUntil { collector.lines.contains { $0.contains("warm-up finished") } }
            var configuration = proxy.server.context.configuration
            configuration.prefetch.urls = ["/first", "/later"]
            try await proxy.server.reload(configuration)
            let ready = try await proxy.admin("/ready")
            #expect(ready.status == .ok)
            gate.open()
        }
    }

    @Test("the prefetch endpoint answers per URL and platform, and bad URLs fail alone")
    func endpointResults() async throws {
        try await ProxyHarness.run(origin: { request in
            switch request.uri {
            case "/private":
                TestOrigin.Response(
                    headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
                    body: #"{"_beagleComponent_":"a"}"#
                )
            case "/missing": TestOrigin.Response(status: .notFound, body: "")
            default: .component()
            }
        }) { proxy async throws in
            let reply = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body:
                    #"{"urls":["/a","/private","/missing","http://elsewhere.example/x","relative"],"platforms":["ios","WEB"]}"#
            )
            #expect(reply.status == .ok)
            let results =
                try #require(try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any])["results"]
                as? [[String: Any]]
            #expect(results?.count == 10)
            func status(_ url: String, _ platform: String) -> String? {
                results?.first { $0["url"] as? String == url && $0["platform"] as? String == platform }?["status"]
                    as? String
            }
            #expect(status("/a", "IOS") == "cached")
            #expect(status("/a", "WEB") == "cached")
            #expect(status("/private", "IOS") == "uncacheable")
            #expect(status("/missing", "WEB") == "failed")
            #expect(status("http://elsewhere.example/x", "IOS") == "failed")
            #expect(status("relative", "WEB") == "failed")
            let cached = results?.first { $0["url"] as? String == "/a" }
            #expect((cached?["bytes"] as? Int ?? 0) > 0)
            #expect(cached?["error"] is NSNull)
            #expect(try await proxy.get("/a", headers: [("beagle-platform", "IOS")])["X-Cache"] == "HIT")
            #expect(proxy.origin.requests.allSatisfy { !$0.uri.contains("elsewhere") && $0.uri != "relative" })
        }
    }

    @Test("the prefetch endpoint fetches for each platform once, and refuses more than 16 of them")
    func endpointPlatforms() async throws {
        try await ProxyHarness.run(configure: { $0.platform.allowed = [] }) { proxy async throws in
            let many = "ABCDEFGHIJKLMNOPQ".map { #""X\#($0)""# }.joined(separator: ",")
            let refused = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/a"],"platforms":[\#(many)]}"#
            )
            #expect(refused.status == .badRequest)
            #expect(refused.body.contains("at most 16"))
            #expect(proxy.origin.requestCount == 0)
            let reply = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/a"],"platforms":["IOS","IOS","ios"]}"#
            )
            #expect(reply.status == .ok)
            #expect(proxy.origin.requests(to: "/a").count == 1)
        }
    }

    @Test(
        "malformed bodies, wrong types and limits are refused with the error body",
        arguments: [
            ("not json", HTTPResponseStatus.badRequest, "badRequest"),
            (#"{"urls":"/a"}"#, .badRequest, "urls: expected a list of URLs, got a string"),
            (#"{"urls":[1]}"#, .badRequest, "urls[0]: expected a URL (a string), got the number 1"),
            (#"{"platforms":["IOS"]}"#, .badRequest, "urls: missing"),
            (#"["/a"]"#, .badRequest, "expected an object like"),
            (
                #"{"urls":["/a"],"platforms":"IOS"}"#, .badRequest,
                "platforms: expected a list of platform names, got a string"
            ),
            (
                #"{"urls":["/a"],"followActions":"1"}"#, .badRequest,
                "followActions: expected a whole number, got a string"
            ),
            (#"{"urls":["/a"],"fleet":"yes"}"#, .badRequest, "fleet: expected true or false, got a string"),
            (#"{"urls":[]}"#, .badRequest, "1 to 3"),
            (#"{"urls":["/a","/b","/c","/d"]}"#, .badRequest, "1 to 3"),
            (#"{"urls":["/a"],"platforms":["TV"]}"#, .badRequest, "unknown platform"),
            (#"{"urls":["/a"],"followActions":99}"#, .badRequest, "followActions"),
            (#"{"urls":["/\#(String(repeating: "a", count: 600))"]}"#, .payloadTooLarge, "tooLarge"),
        ]
    )
    func endpointRefusals(body: String, status: HTTPResponseStatus, message: String) async throws {
        try await ProxyHarness.run(configure: {
            $0.prefetch.maxURLsPerRequest = 3
            $0.prefetch.maxRequestBytes = 512
        }) { proxy async throws in
            let reply = try await proxy.admin("/prefetch", method: .POST, body: body)
            #expect(reply.status == status)
            #expect(reply.body.contains(message), "\(reply.body)")
            #expect(reply.body.hasPrefix(#"{"error":"#))
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("navigation targets of stored components are prefetched for the same platform; expressions are skipped")
    func followsActionsOnSampleScreens() async throws {
        try await ProxyHarness.run(origin: Self.files(in: Self.samples)) { proxy async throws in
            _ = try await proxy.get("/screens/home", headers: [("beagle-platform", "IOS")])
            // The origin sees a prefetch before the proxy has stored its answer: wait for the entries themselves.
            try await waitUntil { proxy.server.context.cache.statistics.entries == 3 }
            #expect(
                Set(proxy.origin.requests.map(\.uri)) == ["/screens/home", "/screens/products", "/screens/products/2"]
            )
            #expect(proxy.origin.requests.allSatisfy { $0.headers.first(name: "beagle-platform") == "IOS" })
            #expect(
                try await proxy.get("/screens/products/2", headers: [("beagle-platform", "IOS")])["X-Cache"] == "HIT"
            )
            #expect(
                try await proxy.get("/screens/products/2", headers: [("beagle-platform", "WEB")])["X-Cache"] == "MISS"
            )
        }
    }

    @Test("the Beagle fixtures: only shouldPrefetch routes with literal same-origin URLs are followed")
    func followsActionsOnFixtures() async throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.fixtures.path).filter {
            $0.hasSuffix(".json")
        }
        #expect(names.count > 30)
        // welcome-screen.json and catalog-list.json ask to prefetch these paths. Every other route is an
        // expression, on another host (http://localhost:8080 is not this test's origin), of another scheme, a
        // POST, or says shouldPrefetch false; and action documents are no components, so are not stored.
        let followed: Set<String> = ["/screens/profile", "/screens/cart"]
        try await ProxyHarness.run(origin: Self.files(in: Self.fixtures)) { proxy async throws in
            let urls = names.map { #""/\#($0)""# }.joined(separator: ",")
            let reply = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":[\#(urls)],"platforms":["IOS"]}"#
            )
            #expect(reply.status == .ok)
            let results =
                try #require(try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any])["results"]
                as? [[String: Any]]
            let cached = Set(
                results?.filter { $0["status"] as? String == "cached" }.compactMap { $0["url"] as? String } ?? []
            )
            #expect(cached.isSuperset(of: ["/welcome-screen.json", "/catalog-list.json"]))
            // A stored component queues its targets before its prefetch ends, so once as many prefetches have
            // ended as were asked for and followed, no other can have started.
            let prefetcher = proxy.server.prefetcher
            func ended() -> Int {
                let counts = prefetcher.counts
                return counts.cached + counts.uncacheable + counts.failed
            }
            try await waitUntil { ended() >= names.count + followed.count }
            #expect(ended() == names.count + followed.count)
            #expect(Set(proxy.origin.requests.map(\.uri)) == Set(names.map { "/" + $0 }).union(followed))
            #expect(proxy.origin.requestCount == names.count + followed.count)
        }
    }

    @Test("action following stops after followActions hops")
    func hopLimit() async throws {
        try await ProxyHarness.run(
            origin: { request in
                let next = ["/a": "/b", "/b": "/c", "/c": "/d", "/d": "/e"][request.uri] ?? "/z"
                return Self.component(linkingTo: [next])
            },
            configure: {
                $0.prefetch.followActions = 2
                $0.prefetch.concurrency = 1
            }
        ) { proxy async throws in
            _ = try await proxy.get("/a")
            // /b and /c prefetched: /c, the last hop, is stored before its prefetch ends.
            try await waitUntil { proxy.server.prefetcher.counts.cached >= 2 }
            try await PrefetchTests.settle(proxy)
            #expect(PrefetchTests.fetched(proxy).sorted() == ["/a", "/b", "/c"])
        }
        try await ProxyHarness.run(
            origin: { _ in Self.component(linkingTo: ["/next"]) },
            configure: {
                $0.prefetch.followActions = 0
                $0.prefetch.concurrency = 1
            }
        ) { proxy async throws in
            _ = try await proxy.get("/a")
            try await PrefetchTests.settle(proxy)
            #expect(PrefetchTests.fetched(proxy) == ["/a"])
        }
    }

    @Test("absolute action URLs are followed only on the upstream's origin or an allowed host")
    func hostAllowList() async throws {
        let originPort = NIOLockedValueBox(0)
        try await ProxyHarness.run(
            origin: { request in
                guard request.uri == "/start" else { return .component() }
                let port = originPort.withLockedValue { $0 }
                return Self.component(linkingTo: [
                    "http://127.0.0.1:\(port)/same-origin", "https://app.example.com/allowed?x=1",
                    "https://evil.example/stolen", "ftp://127.0.0.1/ftp",
                ])
            },
            configure: {
                $0.prefetch.allowedHosts = ["app.example.com"]
                $0.prefetch.concurrency = 1
            }
        ) { proxy async throws in
            originPort.withLockedValue { $0 = proxy.origin.port }
            _ = try await proxy.get("/start")
            try await waitUntil { proxy.origin.requestCount >= 3 }
            try await PrefetchTests.settle(proxy)
            #expect(Set(PrefetchTests.fetched(proxy)) == ["/start", "/same-origin", "/allowed?x=1"])
        }
    }

    @Test("a client and a prefetch racing for one key send one request upstream")
    func clientAndPrefetchRace() async throws {
        let gate = OriginGate()
        try await ProxyHarness.run(origin: { _ in .component(heldBy: gate) }) { proxy async throws in
            async let prefetched = proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/race"],"platforms":["WEB"]}"#
            )
            // The prefetch is at the origin (which holds its answer) before the client asks, and the client waits
            // for it before the origin answers.
            try await waitUntil { proxy.origin.requestCount == 1 }
            async let client = proxy.get("/race")
            try await waitUntil { proxy.server.context.fetcher.coalescer.coalescedWaits == 1 }
            gate.open()
            #expect(try await client.status == .ok)
            #expect(try await prefetched.body.contains(#""status":"cached""#))
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("with refresh on, declared URLs are fetched again shortly before they expire")
    func refresh() async throws {
        // Four seconds of freshness: the hit below comes well inside them, however long a loaded machine takes.
        try await Self.refreshingDeclaredURL(answers: { _ in
            TestOrigin.Response.component(maxAge: 4).withHeader("ETag", "\"same\"")
        }) { proxy async throws in
            // The refresh is done when its answer is stored, a moment after the origin has seen it.
            try await waitUntil(timeout: .seconds(30)) { proxy.server.context.cache.statistics.stores >= 2 }
            #expect(proxy.origin.requests[1].headers.first(name: "if-none-match") == "\"same\"")
            #expect(try await proxy.get("/declared")["X-Cache"] == "HIT")
        }
    }

    @Test(
        "a refresh the backend fails, or answers with something not to store, is tried again at the same interval",
        arguments: [
            TestOrigin.Response(status: .serviceUnavailable, body: "down"),
            TestOrigin.Response.component(maxAge: nil).withHeader("Cache-Control", "no-store"),
        ]
    )
    func refreshOutlivesABadAnswer(badAnswer: TestOrigin.Response) async throws {
        // Four seconds of freshness: the hit below comes well inside what the last refresh stored.
        try await Self.refreshingDeclaredURL(answers: { $0 == 2 ? badAnswer : .component(maxAge: 4) }) {
            proxy async throws in
            // The warm-up, the refresh that gets the bad answer, then the one an interval later that stores: seven
            // seconds or so, more on a loaded machine.
            try await waitUntil(timeout: .seconds(30)) { proxy.server.context.cache.statistics.stores >= 2 }
            #expect(proxy.origin.requestCount >= 3)
            #expect(try await proxy.get("/declared")["X-Cache"] == "HIT")
        }
    }

    @Test("an answer that arrives with no whole second of its lifetime left is still refreshed")
    func refreshOfAnAnswerStaleOnArrival() async throws {
        try await Self.refreshingDeclaredURL(answers: { number in
            let response = TestOrigin.Response.component(maxAge: 2)
            return number == 1 ? response.withHeader("Age", "2") : response
        }) { proxy async throws in
            // No client asks: only a refresh can send the second request.
            try await waitUntil(timeout: .seconds(30)) { proxy.origin.requestCount >= 2 }
        }
    }

    @Test("with refresh on, a declared URL the backend failed at start-up is warmed once the backend is back")
    func warmUpRetriedAfterAFailure() async throws {
        try await Self.refreshingDeclaredURL(answers: { number in
            number == 1 ? TestOrigin.Response(status: .badGateway, body: "down") : .component(maxAge: 60)
        }) { proxy async throws in
            try await waitUntil { proxy.server.context.cache.statistics.stores == 1 }
            #expect(proxy.origin.requestCount == 2)
            #expect(try await proxy.get("/declared")["X-Cache"] == "HIT")
        }
    }

    /// Runs `body` with a proxy that declares `/declared` for WEB with refresh on, in front of an origin that
    /// gives its n-th request (from 1) `answers(n)`.
    private static func refreshingDeclaredURL(
        answers: @escaping @Sendable (Int) -> TestOrigin.Response,
        _ body: (ProxyHarness) async throws -> Void
    ) async throws {
        let answered = NIOLockedValueBox(0)
        try await ProxyHarness.run(
            origin: { _ in
                answers(
                    answered.withLockedValue {
                        $0 += 1
                        return $0
                    }
                )
            },
            configure: {
                $0.prefetch.urls = ["/declared"]
                $0.prefetch.platforms = ["WEB"]
                $0.prefetch.refresh = true
            },
            body
        )
    }
}

@Suite("When a declared URL is fetched again")
struct RefreshScheduleTests {
    typealias Next = RefreshSchedule.Next

    static func stored(freshFor: Int64, lifetime: Int64) -> Prefetcher.Outcome {
        .cached(bytes: 10, freshFor: freshFor, lifetime: lifetime)
    }

    @Test("a stored answer is fetched again when a tenth of its lifetime, at least a second, is left")
    func stored() {
        let first = RefreshSchedule().next(after: Self.stored(freshFor: 100, lifetime: 100))
        guard case .fetch(let delay, let schedule) = first else {
            Issue.record("stopped")
            return
        }
        #expect(delay == .seconds(90))
        #expect(schedule.interval == .seconds(90))
        #expect(schedule.refreshesStoredAnswer)
        guard case .fetch(let short, _) = RefreshSchedule().next(after: Self.stored(freshFor: 5, lifetime: 5)) else {
            Issue.record("stopped")
            return
        }
        #expect(short == .seconds(4))
        guard case .fetch(let tiny, _) = RefreshSchedule().next(after: Self.stored(freshFor: 1, lifetime: 1)) else {
            Issue.record("stopped")
            return
        }
        #expect(tiny == .seconds(1))
    }

    @Test("an answer with none of its lifetime left is fetched again after a tenth of it")
    func noLifetimeLeft() {
        #expect(
            RefreshSchedule().next(after: Self.stored(freshFor: 0, lifetime: 300))
                == .fetch(after: .seconds(30), schedule: RefreshSchedule(interval: .seconds(270)))
        )
    }

    @Test("after a stored answer, a failure or an answer not to store keeps the interval")
    func keepsTheInterval() {
        let schedule = RefreshSchedule(interval: .seconds(54))
        let failed = Prefetcher.Outcome.failed(ProxyError(.network, "down"))
        #expect(schedule.next(after: failed) == .fetch(after: .seconds(54), schedule: schedule))
        #expect(
            schedule.next(after: .uncacheable(reason: "no-store")) == .fetch(after: .seconds(54), schedule: schedule)
        )
        #expect(
            schedule.next(after: Self.stored(freshFor: 0, lifetime: 0))
                == .fetch(after: .seconds(54), schedule: schedule)
        )
    }

    @Test("before anything was stored, failures are retried after 1, 2, 4 ... seconds, at most a minute apart")
    func backoffBeforeStoring() {
        let failed = Prefetcher.Outcome.failed(ProxyError(.timeout, "slow"))
        var schedule = RefreshSchedule()
        var delays: [TimeAmount] = []
        for _ in 0..<9 {
            guard case .fetch(let delay, let next) = schedule.next(after: failed) else {
                Issue.record("stopped")
                return
            }
            #expect(!next.refreshesStoredAnswer)
            delays.append(delay)
            schedule = next
        }
        #expect(delays == [1, 2, 4, 8, 16, 32, 60, 60, 60].map { TimeAmount.seconds($0) })
        // The first answer stored sets the interval and ends the backoff.
        guard case .fetch(_, let afterStoring) = schedule.next(after: Self.stored(freshFor: 60, lifetime: 60)) else {
            Issue.record("stopped")
            return
        }
        #expect(afterStoring == RefreshSchedule(interval: .seconds(54)))
    }

    @Test("a first answer that may not be stored, or has no lifetime, is not asked for again")
    func stops() {
        #expect(RefreshSchedule().next(after: .uncacheable(reason: "no-store")) == .stop)
        #expect(RefreshSchedule().next(after: Self.stored(freshFor: 0, lifetime: 0)) == .stop)
    }
}

@Suite("Prefetch under load")
struct PrefetchLoadTests {
    @Test("a long backlog of prefetches issued from one event loop completes, each answered from the cache")
    func longBacklog() async throws {
        try await ProxyHarness.run(configure: { $0.prefetch.concurrency = 1 }) { proxy async throws in
            _ = try await proxy.get("/fresh")
            let prefetcher = proxy.server.prefetcher
            // Issued from an event loop, as stored components do: every job then lands on that one loop.
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            let outcomes = try await loop.submit {
                (0..<50_000).map { _ in prefetcher.prefetch(target: "/fresh", platform: "WEB", followActions: 0) }
            }.get()
            let results = try await EventLoopFuture.whenAllSucceed(outcomes, on: outcomes[0].eventLoop).get()
            #expect(results.count == 50_000)
            #expect(results.allSatisfy { $0.name == "cached" })
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("many components linking to the same screens prefetch each screen once")
    func sharedTargetsOnce() async throws {
        try await ProxyHarness.run(
            origin: { request in
                request.uri.hasPrefix("/shared")
                    ? .component()
                    : PrefetchTests.component(linkingTo: ["/shared-a", "/shared-b"])
            },
            configure: { $0.prefetch.concurrency = 1 }
        ) { proxy async throws in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<100 { group.addTask { _ = try await proxy.get("/page/\(index)") } }
                try await group.waitForAll()
            }
            try await waitUntil { proxy.origin.requests(to: "/shared-b").count >= 1 }
            try await PrefetchTests.settle(proxy)
            #expect(proxy.origin.requests(to: "/shared-a").count == 1)
            #expect(proxy.origin.requests(to: "/shared-b").count == 1)
        }
    }

    @Test("a linked screen whose prefetch stored nothing is not prefetched again for every component that links it")
    func unstorableLinkNotRefetched() async throws {
        try await ProxyHarness.run(
            origin: { request in
                request.uri == "/account"
                    ? TestOrigin.Response.component().withHeader("Cache-Control", "private")
                    : PrefetchTests.component(linkingTo: ["/account"])
            },
            configure: { $0.prefetch.concurrency = 1 }
        ) { proxy async throws in
            _ = try await proxy.get("/page/1")
            try await waitUntil { proxy.origin.requests(to: "/account").count == 1 }
            for index in 2...5 { _ = try await proxy.get("/page/\(index)") }
            try await PrefetchTests.settle(proxy)
            #expect(proxy.origin.requests(to: "/account").count == 1)
        }
    }

    @Test(
        "a linked screen found fresh is not asked about again on that loop within the recheck interval, and is after it",
        arguments: [(TimeAmount.seconds(60), 1), (.zero, 2)]
    )
    func freshLinkRecheckedAfterAnInterval(recheckInterval: TimeAmount, linkedFetches: Int) async throws {
        // One loop, so that every component is stored where the first one found the linked screen fresh.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        try await ProxyHarness.run(
            origin: { request in
                request.uri.hasPrefix("/linked") ? .component() : PrefetchTests.component(linkingTo: ["/linked"])
            },
            configure: { $0.prefetch.concurrency = 1 },
            eventLoopGroup: group,
            tuning: .init(freshTargetRecheckInterval: recheckInterval)
        ) { proxy async throws in
            _ = try await proxy.get("/page/1")
            try await waitUntil { proxy.server.context.cache.statistics.entries == 2 }
            _ = try await proxy.get("/page/2")  // finds /linked fresh
            // The fresh check runs on the loop just after the answer is written, so the client can have the answer
            // first: the invalidation below must come after the check. A prefetch on the same single loop runs after
            // it.
            try await PrefetchTests.settle(proxy)
            #expect(
                proxy.server.context.cache.invalidate(CacheInvalidation(.targets(["/linked"])), now: .now()).responses
                    == 1
            )
            // Within the interval it takes /linked as fresh still; past it, it asks again and prefetches it.
            _ = try await proxy.get("/page/3")
            try await waitUntil { proxy.origin.requests(to: "/linked").count == linkedFetches }
            try await PrefetchTests.settle(proxy)
            #expect(proxy.origin.requests(to: "/linked").count == linkedFetches)
        }
        try await group.shutdownGracefully()
    }
}

@Suite("The navigation targets a loop found fresh lately")
struct RecentlyFreshTargetsTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    @Test("a target counts as fresh for the recheck interval after it was found fresh, for its platform only")
    func interval() {
        let recent = RecentlyFreshTargets(recheckInterval: .seconds(1))
        #expect(!recent.contains("/a", platform: "IOS", at: start))
        recent.insert("/a", platform: "IOS", at: start)
        #expect(recent.contains("/a", platform: "IOS", at: start + .milliseconds(999)))
        #expect(!recent.contains("/a", platform: "IOS", at: start + .seconds(1)))
        #expect(!recent.contains("/a", platform: "WEB", at: start))
        #expect(!recent.contains("/b", platform: "IOS", at: start))
        recent.insert("/a", platform: "IOS", at: start + .seconds(5))
        #expect(recent.contains("/a", platform: "IOS", at: start + .seconds(5)))
    }

    @Test("past its capacity it forgets every target, and holds no more than that")
    func capacity() {
        let recent = RecentlyFreshTargets(capacity: 3)
        for index in 0..<3 { recent.insert("/\(index)", platform: "IOS", at: start) }
        #expect(recent.count == 3)
        recent.insert("/3", platform: "IOS", at: start)
        #expect(recent.count == 1)
        #expect(recent.contains("/3", platform: "IOS", at: start))
        #expect(!recent.contains("/0", platform: "IOS", at: start))
    }
}
