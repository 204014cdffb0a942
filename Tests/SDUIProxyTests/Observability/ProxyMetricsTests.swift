import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The lines of a rendering, without the HELP and TYPE comments.
private func samples(_ text: String) -> Set<String> {
    Set(text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") })
}

@Suite("Metrics: Prometheus text after known recordings")
struct ProxyMetricsTests {
    @Test("requests are counted by method, status class and cache result")
    func requestCounter() {
        let metrics = ProxyMetrics()
        let tally = metrics.requestTally(for: MultiThreadedEventLoopGroup.singleton.next())
        for _ in 0..<3 { tally.count(method: .GET, statusCode: 200, cacheResult: .hit) }
        tally.count(method: .GET, statusCode: 200, cacheResult: .miss)
        tally.count(method: .HEAD, statusCode: 304, cacheResult: .revalidated)
        tally.count(method: .GET, statusCode: 502, cacheResult: .miss)
        tally.count(method: .POST, statusCode: 201, cacheResult: nil)
        tally.count(method: .RAW(value: "PROPFIND"), statusCode: 404, cacheResult: nil)
        tally.count(method: .GET, statusCode: 999, cacheResult: .bypass)

        let lines = samples(metrics.render())
        #expect(lines.contains(#"sdui_requests_total{method="GET",status_class="2xx",cache="HIT"} 3"#))
        #expect(lines.contains(#"sdui_requests_total{method="GET",status_class="2xx",cache="MISS"} 1"#))
        #expect(lines.contains(#"sdui_requests_total{method="HEAD",status_class="3xx",cache="REVALIDATED"} 1"#))
        #expect(lines.contains(#"sdui_requests_total{method="GET",status_class="5xx",cache="MISS"} 1"#))
        #expect(lines.contains(#"sdui_requests_total{method="POST",status_class="2xx",cache="none"} 1"#))
        #expect(lines.contains(#"sdui_requests_total{method="OTHER",status_class="4xx",cache="none"} 1"#))
        #expect(lines.contains(#"sdui_requests_total{method="GET",status_class="other",cache="BYPASS"} 1"#))
        // Only the combinations that happened are exported.
        #expect(lines.filter { $0.hasPrefix("sdui_requests_total") }.count == 7)
        #expect(metrics.render().contains("# TYPE sdui_requests_total counter\n"))
    }

    @Test("counting in one tally from many tasks at once loses nothing")
    func concurrentRecording() async {
        let metrics = ProxyMetrics()
        let tally = metrics.requestTally(for: MultiThreadedEventLoopGroup.singleton.next())
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<1000 { tally.count(method: .GET, statusCode: 200, cacheResult: .hit) }
                }
            }
        }
        #expect(
            samples(metrics.render()).contains(
                #"sdui_requests_total{method="GET",status_class="2xx",cache="HIT"} 8000"#
            )
        )
    }

    @Test("each loop counts in a tally of its own; rendering adds them up, and adds only what is new each time")
    func loopTallies() async throws {
        let metrics = ProxyMetrics()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        #expect(metrics.requestTally(for: loops[0]) === metrics.requestTally(for: loops[0]))
        #expect(metrics.requestTally(for: loops[0]) !== metrics.requestTally(for: loops[1]))
        func count(_ times: Int, on loop: any EventLoop) async throws {
            try await loop.submit {
                let tally = metrics.requestTally(for: loop)
                for _ in 0..<times { tally.count(method: .GET, statusCode: 200, cacheResult: .hit) }
            }.get()
        }
        let hits = #"sdui_requests_total{method="GET",status_class="2xx",cache="HIT"} "#
        try await count(5, on: loops[0])
        try await count(7, on: loops[1])
        // A third loop, outside the group, has a tally of its own too.
        metrics.requestTally(for: MultiThreadedEventLoopGroup.singleton.next())
            .count(method: .GET, statusCode: 200, cacheResult: .hit)
        #expect(samples(metrics.render()).contains(hits + "13"))
        #expect(samples(metrics.render()).contains(hits + "13"))
        try await count(2, on: loops[1])
        #expect(samples(metrics.render()).contains(hits + "15"))
        try await group.shutdownGracefully()
    }

    @Test("upstream latency goes into cumulative histogram buckets in seconds")
    func upstreamHistogram() {
        let metrics = ProxyMetrics()
        metrics.upstreamCompleted(duration: .microseconds(800))
        metrics.upstreamCompleted(duration: .milliseconds(20))
        metrics.upstreamCompleted(duration: .milliseconds(300))
        metrics.upstreamCompleted(duration: .seconds(30))

        let lines = samples(metrics.render())
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="0.001"} 1"#))
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="0.0025"} 1"#))
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="0.025"} 2"#))
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="0.25"} 2"#))
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="0.5"} 3"#))
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="10.0"} 3"#))
        #expect(lines.contains(#"sdui_upstream_duration_seconds_bucket{le="+Inf"} 4"#))
        #expect(lines.contains("sdui_upstream_duration_seconds_count 4"))
        #expect(lines.contains("sdui_upstream_duration_seconds_sum 30.3208"))
    }

    @Test("upstream errors by kind, coalesced waits, prefetch outcomes")
    func counters() {
        let metrics = ProxyMetrics()
        metrics.upstreamFailed(kind: .timeout)
        metrics.upstreamFailed(kind: .timeout)
        metrics.upstreamFailed(kind: .decoding)
        for _ in 0..<5 { metrics.coalescedWait() }
        metrics.prefetch(outcome: .cached)
        metrics.prefetch(outcome: .cached)
        metrics.prefetch(outcome: .uncacheable)

        let lines = samples(metrics.render())
        #expect(lines.contains(#"sdui_upstream_errors_total{kind="timeout"} 2"#))
        #expect(lines.contains(#"sdui_upstream_errors_total{kind="decoding"} 1"#))
        #expect(lines.contains("sdui_coalesced_waits_total 5"))
        #expect(lines.contains(#"sdui_prefetch_total{outcome="cached"} 2"#))
        #expect(lines.contains(#"sdui_prefetch_total{outcome="failed"} 0"#))
        #expect(lines.contains(#"sdui_prefetch_total{outcome="uncacheable"} 1"#))
    }

    @Test("cache and queue figures are read from the snapshot at every render")
    func snapshotGauges() {
        let figures = NIOLockedValueBox(
            ProxyMetrics.Snapshot(cacheEntries: 3, cacheBytes: 4096, cacheEvictions: 1, cacheHits: 10, cacheMisses: 4)
        )
        let metrics = ProxyMetrics(snapshot: { figures.withLockedValue { $0 } })

        var lines = samples(metrics.render())
        #expect(lines.contains("sdui_cache_entries 3.0"))
        #expect(lines.contains("sdui_cache_bytes 4096.0"))
        #expect(lines.contains("sdui_cache_evictions_total 1"))
        #expect(lines.contains("sdui_cache_hits_total 10"))
        #expect(lines.contains("sdui_cache_misses_total 4"))
        #expect(!lines.contains { $0.hasPrefix("sdui_queue_depth") })

        figures.withLockedValue {
            $0 = ProxyMetrics.Snapshot(
                cacheEntries: 2,
                cacheBytes: 100,
                cacheEvictions: 7,
                cacheHits: 25,
                cacheMisses: 4,
                queueDepth: 9
            )
        }
        lines = samples(metrics.render())
        #expect(lines.contains("sdui_cache_entries 2.0"))
        #expect(lines.contains("sdui_cache_bytes 100.0"))
        #expect(lines.contains("sdui_cache_evictions_total 7"))
        #expect(lines.contains("sdui_cache_hits_total 25"))
        // Rendering twice does not add the figures up.
        #expect(samples(metrics.render()).contains("sdui_cache_hits_total 25"))
        #expect(lines.contains("sdui_queue_depth 9.0"))
    }

    @Test("the snapshot can come from a real ResponseCache's statistics")
    func snapshotFromCache() throws {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let key = CacheKey(target: "/screens/home", platform: "WEB", varyValues: [])
        _ = cache.lookup(key, requestHeaders: [:], now: .now())
        _ = cache.lookup(key, requestHeaders: [:], now: .now())
        let metrics = ProxyMetrics()
        metrics.setSnapshotProvider { ProxyMetrics.Snapshot(cache.statistics) }

        let lines = samples(metrics.render())
        #expect(cache.statistics.misses == 2)
        #expect(lines.contains("sdui_cache_misses_total 2"))
        #expect(lines.contains("sdui_cache_hits_total 0"))
        #expect(lines.contains("sdui_cache_entries 0.0"))
    }

    @Test("two instances keep separate numbers")
    func separateInstances() {
        let first = ProxyMetrics()
        let second = ProxyMetrics()
        first.coalescedWait()
        #expect(samples(first.render()).contains("sdui_coalesced_waits_total 1"))
        #expect(samples(second.render()).contains("sdui_coalesced_waits_total 0"))
    }

    @Test("the connection gauge follows real loopback connections as they open and close")
    func connectionGauge() async throws {
        let metrics = ProxyMetrics()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let limiter = ConnectionLimiter(maximum: 100, metrics: metrics)
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    _ = try limiter.admit(channel)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(server.localAddress?.port)

        func openConnections() -> String? {
            samples(metrics.render()).first { $0.hasPrefix("sdui_open_connections ") }
        }
        func waitFor(_ expected: String) async throws -> Bool {
            for _ in 0..<1000 {
                if openConnections() == expected { return true }
                try await Task.sleep(for: .milliseconds(10))
            }
            return false
        }

        #expect(openConnections() == "sdui_open_connections 0.0")
        let clients = try await withThrowingTaskGroup(of: (any Channel).self) { tasks in
            for _ in 0..<3 {
                tasks.addTask { try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: port).get() }
            }
            return try await tasks.reduce(into: []) { $0.append($1) }
        }
        #expect(try await waitFor("sdui_open_connections 3.0"))
        try await clients[0].close()
        try await clients[1].close()
        #expect(try await waitFor("sdui_open_connections 1.0"))
        try await clients[2].close()
        #expect(try await waitFor("sdui_open_connections 0.0"))

        try await server.close()
        try await group.shutdownGracefully()
    }
}
