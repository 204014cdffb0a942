import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A coding is made when a client first asks for it: the fill's own client, or a later hit (a fill that found the
/// compression pool full among them), over loopback, with a pool the test holds.
@Suite struct CompressionOnHitTests {
    private static let screen: String = {
        let items = (0..<30).map { #"{"_beagleComponent_":"beagle:text","text":"item \#($0)"}"# }
        return #"{"_beagleComponent_":"beagle:screenComponent","children":["# + items.joined(separator: ",") + "]}"
    }()

    @Test("an entry skipped at store time is compressed after a gzip hit, and later hits get the gzip form")
    func skippedThenCompressedOnHit() async throws {
        // One thread runs the jobs in the order they came; two may be unfinished at once.
        try await Self.run(maximumUnfinished: 2) { proxy, pool in
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            let gzip = [("Accept-Encoding", "gzip")]
            // Two jobs held: the pool is full when the miss is stored.
            let release = ConditionLock(value: 0)
            let held = (0..<2).compactMap { _ in
                pool.run(on: loop) {
                    release.lock(whenValue: 1)
                    release.unlock()
                }
            }
            #expect(held.count == 2)
            let miss = try await proxy.get("/screens/home", headers: gzip)
            #expect(miss["x-cache"] == "MISS" && miss["content-encoding"] == nil)
            release.lock()
            release.unlock(withValue: 1)
            for job in held { try await job.get() }

            // The first hit is in identity, and sends the body to the pool.
            let hit = try await proxy.get("/screens/home", headers: gzip)
            #expect(hit["x-cache"] == "HIT" && hit["content-encoding"] == nil && hit.body == Self.screen)
            // Behind the compression on the one thread: when this job has run, so has the compression.
            try await Self.drain(pool)

            let compressed = try await proxy.get("/screens/home", headers: gzip)
            #expect(compressed["x-cache"] == "HIT" && compressed["content-encoding"] == "gzip")
            #expect(compressed.bytes.readableBytes < Self.screen.utf8.count / 2)
            #expect(proxy.origin.requests.count == 1)
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains("sdui_compressions_on_hit_total 1"))
            #expect(metrics.contains("sdui_compressions_skipped_total 1"))
        }
    }

    /// The proxy with a one-thread pool the test holds (`maximumUnfinished` jobs at most), in front of `origin`
    /// (by default, `Self.screen`).
    private static func run(
        origin: TestOrigin.Responder? = nil,
        maximumUnfinished: Int = 8,
        _ body: (ProxyHarness, CompressionPool) async throws -> Void
    ) async throws {
        let pool = CompressionPool(numberOfThreads: 1, maximumUnfinished: maximumUnfinished)
        var tuning = ProxyServer.Tuning()
        tuning.compressionPool = pool
        let screen: TestOrigin.Responder = { _ in
            TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")],
                body: Self.screen
            )
        }
        try await ProxyHarness.run(origin: origin ?? screen, tuning: tuning) { proxy in try await body(proxy, pool) }
    }

    /// Waits for every job sent to the one-thread pool so far: they run in the order they came.
    private static func drain(_ pool: CompressionPool) async throws {
        let marker = try #require(pool.run(on: MultiThreadedEventLoopGroup.singleton.next()) { 1 })
        #expect(try await marker.get() == 1)
    }

    /// `sdui_compressions_total` for `coding`, kept.
    private static func compressions(_ coding: String, _ proxy: ProxyHarness) async throws -> Int {
        let metrics = try await proxy.admin("/metrics").body
        let line = metrics.split(separator: "\n").first {
            $0.hasPrefix("sdui_compressions_total{") && $0.contains(#"coding="\#(coding)""#)
                && $0.contains(#"result="kept""#)
        }
        return line.flatMap { $0.split(separator: " ").last.flatMap { Int($0) } } ?? 0
    }

    @Test("by default a miss makes only the coding its client takes, none for a client that takes none")
    func missMakesWhatItsClientTakes() async throws {
        try await Self.run { proxy, pool in
            let plain = try await proxy.get("/screens/plain")
            #expect(plain["x-cache"] == "MISS" && plain["vary"] == "beagle-platform, Accept-Encoding")
            let brotli = try await proxy.get("/screens/br", headers: [("Accept-Encoding", "gzip, deflate, br")])
            #expect(brotli["x-cache"] == "MISS" && brotli["content-encoding"] == nil)
            try await Self.drain(pool)
            #expect(try await Self.compressions("br", proxy) == 1)
            #expect(try await Self.compressions("gzip", proxy) == 0)

            // The br screen answers br at once; gzip, asked for the first time, is made on that hit.
            let br = try await proxy.get("/screens/br", headers: [("Accept-Encoding", "br")])
            #expect(br["x-cache"] == "HIT" && br["content-encoding"] == "br")
            let firstGzip = try await proxy.get("/screens/br", headers: [("Accept-Encoding", "gzip")])
            #expect(firstGzip["x-cache"] == "HIT" && firstGzip["content-encoding"] == nil)
            try await Self.drain(pool)
            let gzip = try await proxy.get("/screens/br", headers: [("Accept-Encoding", "gzip")])
            #expect(gzip["content-encoding"] == "gzip" && gzip.bytes.readableBytes < Self.screen.utf8.count / 2)
            #expect(try await Self.compressions("gzip", proxy) == 1)

            // The plain screen: made in a coding when a client first asks, and in the one that client prefers.
            let identity = try await proxy.get("/screens/plain")
            #expect(identity["content-encoding"] == nil)
            let first = try await proxy.get("/screens/plain", headers: [("Accept-Encoding", "gzip, br")])
            #expect(first["x-cache"] == "HIT" && first["content-encoding"] == nil && first.body == Self.screen)
            try await Self.drain(pool)
            let again = try await proxy.get("/screens/plain", headers: [("Accept-Encoding", "gzip, br")])
            #expect(again["content-encoding"] == "br")
            #expect(try await Self.compressions("br", proxy) == 2)
            #expect(try await Self.compressions("gzip", proxy) == 1)
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains("sdui_compressions_on_hit_total 2"))
            #expect(proxy.origin.requests.count == 2)
        }
    }

    @Test("a prefetched screen is made in every coding: no client has asked yet, and any may")
    func prefetchMakesEveryCoding() async throws {
        try await Self.run { proxy, pool in
            let reply = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/screens/next"],"platforms":["WEB"]}"#
            )
            #expect(reply.status == .ok && reply.body.contains(#""status":"cached""#))
            try await Self.drain(pool)
            for coding in ["br", "gzip"] {
                let hit = try await proxy.get("/screens/next", headers: [("Accept-Encoding", coding)])
                #expect(hit["x-cache"] == "HIT" && hit["content-encoding"] == coding)
            }
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains("sdui_compressions_on_hit_total 0"))
        }
    }

    @Test("a request answered after a 304 asks for its coding as a hit does; the entry keeps what it had pending")
    func revalidatedAnswerMakesItsCoding() async throws {
        let origin: TestOrigin.Responder = { request in
            guard request.headers.first(name: "if-none-match") == #""s1""# else {
                return TestOrigin.Response(
                    headers: [("Content-Type", "application/json"), ("Cache-Control", "no-cache"), ("ETag", #""s1""#)],
                    body: Self.screen
                )
            }
            return TestOrigin.Response(
                status: .notModified,
                headers: [("Cache-Control", "no-cache"), ("ETag", #""s1""#)]
            )
        }
        try await Self.run(origin: origin) { proxy, pool in
            let miss = try await proxy.get("/screens/home")
            #expect(miss["x-cache"] == "MISS")
            let first = try await proxy.get("/screens/home", headers: [("Accept-Encoding", "gzip")])
            #expect(first["x-cache"] == "REVALIDATED" && first["content-encoding"] == nil)
            try await Self.drain(pool)
            let second = try await proxy.get("/screens/home", headers: [("Accept-Encoding", "gzip")])
            #expect(second["x-cache"] == "REVALIDATED" && second["content-encoding"] == "gzip")
            #expect(try await Self.compressions("gzip", proxy) == 1)
            #expect(try await Self.compressions("br", proxy) == 0)
            #expect(proxy.origin.requests.count == 3)
        }
    }
}
