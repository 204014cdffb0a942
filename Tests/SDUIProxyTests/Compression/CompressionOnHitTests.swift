import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A fill that finds the compression pool full is stored in identity; the first hit from a client that takes a
/// coding sends it to be compressed, over loopback, with a pool the test holds.
@Suite struct CompressionOnHitTests {
    private static let screen: String = {
        let items = (0..<30).map { #"{"_beagleComponent_":"beagle:text","text":"item \#($0)"}"# }
        return #"{"_beagleComponent_":"beagle:screenComponent","children":["# + items.joined(separator: ",") + "]}"
    }()

    @Test("an entry skipped at store time is compressed after a gzip hit, and later hits get the gzip form")
    func skippedThenCompressedOnHit() async throws {
        // One thread runs the jobs in the order they came; two may be unfinished at once.
        let pool = CompressionPool(numberOfThreads: 1, maximumUnfinished: 2)
        var tuning = ProxyServer.Tuning()
        tuning.compressionPool = pool
        let origin: TestOrigin.Responder = { _ in
            TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")],
                body: Self.screen
            )
        }
        try await ProxyHarness.run(origin: origin, tuning: tuning) { proxy in
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
            let marker = try #require(pool.run(on: loop) { 1 })
            #expect(try await marker.get() == 1)

            let compressed = try await proxy.get("/screens/home", headers: gzip)
            #expect(compressed["x-cache"] == "HIT" && compressed["content-encoding"] == "gzip")
            #expect(compressed.bytes.readableBytes < Self.screen.utf8.count / 2)
            #expect(proxy.origin.requests.count == 1)
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains("sdui_compressions_on_hit_total 1"))
            #expect(metrics.contains("sdui_compressions_skipped_total 1"))
        }
    }
}
