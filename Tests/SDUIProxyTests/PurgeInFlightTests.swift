import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Invalidations that come while a fill is in flight, over real sockets: the fill still answers the requests that
/// were waiting on it, but what it brings is not stored (or is stored stale, for a soft purge), and a request that
/// comes after the invalidation starts a fill of its own.
@Suite("Purges reach the fills in flight")
struct PurgeInFlightTests {
    /// An origin whose first answer for a path is held by `gate` and says `"v":1`; every later answer comes at
    /// once and says `"v":2`. Answers are tagged `home screens` and may be served stale for a minute.
    private static func origin(held gate: OriginGate) -> TestOrigin.Responder {
        let answered = NIOLockedValueBox<[String: Int]>([:])
        return { request in
            if request.method == .POST { return TestOrigin.Response(status: .ok, body: "{}") }
            let number = answered.withLockedValue { counts -> Int in
                counts[request.uri, default: 0] += 1
                return counts[request.uri]!
            }
            var response = TestOrigin.Response.component(
                maxAge: 300,
                extra: #","v":\#(number == 1 ? 1 : 2)"#,
                heldBy: number == 1 ? gate : nil
            )
            response.headers.append(("Cache-Control", "stale-while-revalidate=60"))
            response.headers.append(("Surrogate-Key", "home screens"))
            return response
        }
    }

    /// Runs `body` with a proxy whose fill of `/slow/home` is in flight: the origin has the request and holds its
    /// answer until `gate` opens; `first` is the answer the client that asked will get.
    private static func withFillInFlight(
        _ body: (_ proxy: ProxyHarness, _ gate: OriginGate, _ first: Task<ProxyHarness.Reply, any Error>) async throws
            -> Void
    ) async throws {
        let gate = OriginGate()
        try await ProxyHarness.run(origin: origin(held: gate)) { proxy async throws in
            let first = Task { try await proxy.get("/slow/home") }
            try await waitUntil { proxy.origin.requestCount == 1 }
            try await body(proxy, gate, first)
        }
    }

    static let purges: [(query: String, answer: String)] = [
        ("url=/slow/home", #"{"purged":0,"inFlight":1,"url":"/slow/home"}"#),
        ("prefix=/slow", #"{"purged":0,"inFlight":1,"prefix":"/slow"}"#),
        ("tag=home", #"{"purged":0,"inFlight":1,"tag":"home"}"#),
        ("", #"{"purged":0,"inFlight":1,"all":true}"#),
    ]

    @Test(
        "a purge during a fill: the waiting client gets the old answer, a later request fetches its own, the old is not stored",
        arguments: purges
    )
    func hardPurge(query: String, answer: String) async throws {
        try await Self.withFillInFlight { proxy, gate, first async throws in
            let purge = try await proxy.admin("/cache" + (query.isEmpty ? "" : "?" + query), method: .DELETE)
            #expect(purge.body == answer)

            // Asked after the purge: it does not join the fill in flight, whose answer is still held.
            let second = try await proxy.get("/slow/home")
            #expect(second.body.contains(#""v":2"#))
            #expect(second["X-Cache"] == "MISS")
            #expect(second["Cache-Status"]?.contains("collapsed") == false)
            #expect(proxy.origin.requestCount == 2)

            gate.open()
            let old = try await first.value
            #expect(old.status == .ok)
            #expect(old.body.contains(#""v":1"#))
            let status = try #require(old["Cache-Status"])
            #expect(status.hasPrefix("sdui-proxy; fwd=uri-miss; fwd-status=200; ttl="), "\(status)")
            #expect(status.hasSuffix("; detail=invalidated") && !status.contains("stored"), "\(status)")

            // What is stored is the answer asked for after the purge, never the one asked for before it.
            let next = try await proxy.get("/slow/home")
            #expect(next["X-Cache"] == "HIT")
            #expect(next.body.contains(#""v":2"#))
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains(#"sdui_cache_fills_invalidated_total{effect="discarded"} 1"#))
        }
    }

    @Test("a purge during a fill that no one asks again for: the next request is a miss, not a hit on the old answer")
    func nextRequestMisses() async throws {
        try await Self.withFillInFlight { proxy, gate, first async throws in
            _ = try await proxy.admin("/cache?url=/slow/home", method: .DELETE)
            gate.open()
            #expect(try await first.value.body.contains(#""v":1"#))
            let next = try await proxy.get("/slow/home")
            #expect(next["X-Cache"] == "MISS")
            #expect(next.body.contains(#""v":2"#))
            #expect(try await proxy.get("/slow/home")["X-Cache"] == "HIT")
        }
    }

    @Test("a purge of another screen leaves the fill alone: stored, and later requests join it")
    func otherTarget() async throws {
        try await Self.withFillInFlight { proxy, gate, first async throws in
            let purge = try await proxy.admin("/cache?url=/slow/other", method: .DELETE)
            #expect(purge.body == #"{"purged":0,"inFlight":0,"url":"/slow/other"}"#)
            async let joined = proxy.get("/slow/home")
            try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""coalescedWaits":1"#) }
            gate.open()
            #expect(try await first.value["Cache-Status"]?.hasSuffix("stored") == true)
            #expect(try await joined["Cache-Status"]?.hasSuffix("stored; collapsed") == true)
            #expect(try await proxy.get("/slow/home").body.contains(#""v":1"#))
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("requests that joined the fill before the purge get its answer too")
    func waitersBeforeThePurge() async throws {
        try await Self.withFillInFlight { proxy, gate, first async throws in
            async let waiter = proxy.get("/slow/home")
            try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""coalescedWaits":1"#) }
            _ = try await proxy.admin("/cache?url=/slow/home", method: .DELETE)
            gate.open()
            let waited = try await waiter
            #expect(waited.body.contains(#""v":1"#))
            #expect(waited["Cache-Status"]?.hasSuffix("; collapsed; detail=invalidated") == true)
            #expect(try await first.value.body.contains(#""v":1"#))
            #expect(proxy.origin.requestCount == 1)
            #expect(try await proxy.get("/slow/home")["X-Cache"] == "MISS")
        }
    }

    @Test("a soft purge during a fill stores its answer stale: the next request is served stale and refreshes it")
    func softPurge() async throws {
        try await Self.withFillInFlight { proxy, gate, first async throws in
            let purge = try await proxy.admin("/cache?url=/slow/home&soft=true", method: .DELETE)
            #expect(purge.body == #"{"purged":0,"inFlight":1,"url":"/slow/home","soft":true}"#)
            gate.open()
            #expect(try await first.value.body.contains(#""v":1"#))

            let next = try await proxy.get("/slow/home")
            #expect(next["X-Cache"] == "STALE")
            #expect(next.body.contains(#""v":1"#))
            try await waitUntil { try await proxy.get("/slow/home")["X-Cache"] == "HIT" }
            #expect(try await proxy.get("/slow/home").body.contains(#""v":2"#))
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains(#"sdui_cache_fills_invalidated_total{effect="stale"} 1"#))
        }
    }

    @Test("a successful POST to the screen during its fill invalidates the fill as a purge does")
    func unsafeMethod() async throws {
        try await Self.withFillInFlight { proxy, gate, first async throws in
            #expect(try await proxy.get("/slow/home", method: .POST, body: "{}").status == .ok)
            gate.open()
            #expect(try await first.value["Cache-Status"]?.hasSuffix("detail=invalidated") == true)
            #expect(try await proxy.get("/slow/home")["X-Cache"] == "MISS")
        }
    }

    @Test("a prefetch in flight when its screen is purged is not stored")
    func prefetch() async throws {
        let gate = OriginGate()
        try await ProxyHarness.run(origin: Self.origin(held: gate)) { proxy async throws in
            async let prefetched = proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/slow/home"],"platforms":["WEB"]}"#
            )
            try await waitUntil { proxy.origin.requestCount == 1 }
            let purge = try await proxy.admin("/cache?prefix=/slow", method: .DELETE)
            #expect(purge.body == #"{"purged":0,"inFlight":1,"prefix":"/slow"}"#)
            gate.open()
            let results = try await prefetched.body
            #expect(results.contains(#""status":"uncacheable""#), "\(results)")
            let next = try await proxy.get("/slow/home")
            #expect(next["X-Cache"] == "MISS")
            #expect(next.body.contains(#""v":2"#))
        }
    }
}
