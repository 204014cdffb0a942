import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
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
        #expect(
            lines.contains(#"sdui_requests_total{method="GET",status_class="2xx",cache="HIT",protocol="http/1.1"} 3"#)
        )
        #expect(
            lines.contains(#"sdui_requests_total{method="GET",status_class="2xx",cache="MISS",protocol="http/1.1"} 1"#)
        )
        #expect(
            lines.contains(
                #"sdui_requests_total{method="HEAD",status_class="3xx",cache="REVALIDATED",protocol="http/1.1"} 1"#
            )
        )
        #expect(
            lines.contains(#"sdui_requests_total{method="GET",status_class="5xx",cache="MISS",protocol="http/1.1"} 1"#)
        )
        #expect(
            lines.contains(#"sdui_requests_total{method="POST",status_class="2xx",cache="none",protocol="http/1.1"} 1"#)
        )
        #expect(
            lines.contains(
                #"sdui_requests_total{method="OTHER",status_class="4xx",cache="none",protocol="http/1.1"} 1"#
            )
        )
        #expect(
            lines.contains(
                #"sdui_requests_total{method="GET",status_class="other",cache="BYPASS",protocol="http/1.1"} 1"#
            )
        )
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
                #"sdui_requests_total{method="GET",status_class="2xx",cache="HIT",protocol="http/1.1"} 8000"#
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
        let hits = #"sdui_requests_total{method="GET",status_class="2xx",cache="HIT",protocol="http/1.1"} "#
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
        metrics.upstreamCompleted(after: .microseconds(800))
        metrics.upstreamCompleted(after: .milliseconds(20))
        metrics.upstreamCompleted(after: .milliseconds(300))
        metrics.upstreamCompleted(after: .seconds(30))

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

    @Test("upstream latency counted on several threads renders as one registry histogram of the same durations")
    func upstreamHistogramAcrossThreads() async throws {
        let metrics = ProxyMetrics()
        // Another metrics' recordings on the same threads, in between, count for that one only.
        let other = ProxyMetrics()
        let reference = PrometheusCollectorRegistry()
        // Made as the registry made it before each thread counted in a tally of its own.
        let histogram = reference.makeDurationHistogram(
            descriptor: MetricNameDescriptor(
                namespace: "sdui",
                metricName: "upstream_duration",
                unitName: "seconds",
                helpText: UpstreamDurationHistogram.help
            ),
            buckets: ProxyMetrics.upstreamDurationBuckets
        )
        // Every bound, a nanosecond either side of it, zero, and a spread of odd durations up to 20 s.
        var durations: [Duration] = [.zero, .seconds(60)]
        for bound in ProxyMetrics.upstreamDurationBuckets {
            durations += [bound - .nanoseconds(1), bound, bound + .nanoseconds(1)]
        }
        var seed: UInt64 = 0x5EED
        for _ in 0..<300 {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            durations.append(.nanoseconds(Int64(seed >> 33) % 20_000_000_000))
        }
        for duration in durations { histogram.record(duration) }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        let loops = Array(group.makeIterator())
        for (index, duration) in durations.enumerated() {
            try await loops[index % loops.count].submit {
                metrics.upstreamCompleted(after: .nanoseconds(duration.nanosecondsValue))
                if index % 7 == 0 { other.upstreamCompleted(after: .seconds(3)) }
            }.get()
        }
        // Each loop counted in one tally of its own, however often the two metrics took turns on it, and finds it
        // again after the other metrics' has been in its slot.
        #expect(metrics.upstreamDurations.tallyCount == loops.count)
        #expect(other.upstreamDurations.tallyCount == loops.count)
        var tallies: [UpstreamDurationHistogram.Tally] = []
        for loop in loops {
            let (first, others, again) = try await loop.submit {
                (
                    metrics.upstreamDurations.tally(), other.upstreamDurations.tally(),
                    metrics.upstreamDurations.tally()
                )
            }.get()
            #expect(first === again && first !== others)
            tallies.append(first)
        }
        #expect(Set(tallies.map(ObjectIdentifier.init)).count == loops.count)
        #expect(metrics.upstreamDurations.tallyCount == loops.count)
        // Recorded off the loops too, after the reference: counted once more.
        metrics.upstreamCompleted(after: .milliseconds(7))
        histogram.record(.milliseconds(7))

        func histogramLines(_ text: String) -> [String] {
            text.split(separator: "\n").map(String.init).filter { $0.contains(UpstreamDurationHistogram.name) }
        }
        let expected = histogramLines(reference.emitToString())
        #expect(expected.count == ProxyMetrics.upstreamDurationBuckets.count + 5)
        #expect(histogramLines(metrics.render()) == expected)
        // Rendering reads the tallies without taking from them.
        #expect(histogramLines(metrics.render()) == expected)
        #expect(
            histogramLines(other.render()).contains(
                "\(UpstreamDurationHistogram.name)_count \(durations.count / 7 + 1)"
            )
        )
        try await group.shutdownGracefully()
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

    @Test("the connection gauges follow real connections by protocol as they open, say what they speak, and close")
    func connectionGauges() async throws {
        try await ProxyHarness.run { proxy in
            let metrics = proxy.server.context.metrics
            func sample(_ name: String) -> String? {
                samples(metrics.render()).first { $0.hasPrefix(name + " ") }.map {
                    String($0.dropFirst(name.count + 1))
                }
            }
            func waitFor(_ name: String, _ expected: String) async throws -> Bool {
                for _ in 0..<1000 {
                    if sample(name) == expected { return true }
                    try await Task.sleep(for: .milliseconds(10))
                }
                return false
            }
            let http1 = #"sdui_open_connections{protocol="http/1.1"}"#
            let http2 = #"sdui_open_connections{protocol="h2"}"#
            let setup = #"sdui_open_connections{protocol="setup"}"#

            // Connected, nothing sent: the connection's protocol is not known yet.
            let silent = try await RawConnection(port: proxy.server.publicPort)
            #expect(try await waitFor(setup, "1.0"))
            let first = try await RawConnection(port: proxy.server.publicPort)
            try await first.send("GET /screens/a HTTP/1.1\r\nHost: app.example\r\n\r\n")
            _ = try await first.readResponse()
            let second = try await RawConnection(port: proxy.server.publicPort)
            try await second.send(HTTP2Wire.connectionStart())
            #expect(try await waitFor(http1, "1.0"))
            #expect(try await waitFor(http2, "1.0"))
            #expect(sample(setup) == "1.0")
            #expect(sample(#"sdui_connections_total{protocol="h2",tls="false"}"#) == "1")
            #expect(sample(#"sdui_connections_total{protocol="http/1.1",tls="false"}"#) == "1")
            #expect(
                sample(#"sdui_requests_total{method="GET",status_class="2xx",cache="MISS",protocol="http/1.1"}"#) == "1"
            )

            for connection in [silent, first, second] { await connection.close() }
            #expect(try await waitFor(http1, "0.0"))
            #expect(try await waitFor(http2, "0.0"))
            #expect(try await waitFor(setup, "0.0"))
        }
    }
}
