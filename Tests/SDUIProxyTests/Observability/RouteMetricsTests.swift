import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// `metrics.routes`: requests counted by route template and platform, with their bytes and durations, and every
/// other path under `other`.
@Suite("per-route metrics")
struct RouteMetricsTests {
    @Test("hits and misses by template and platform; bytes and a duration histogram; other paths under other")
    func countsByRouteAndPlatform() async throws {
        try await ProxyHarness.run(configure: {
            $0.metrics.routes = ["/screens/products/{id}", "/screens/home"]
        }) { proxy in
            let ios = [("beagle-platform", "ios")]
            for path in [
                "/screens/products/1", "/screens/products/2", "/screens/products/1?tab=2", "/screens/products/1",
            ] {
                #expect(try await proxy.get(path, headers: ios).status == .ok)
            }
            #expect(try await proxy.get("/screens/home", headers: [("beagle-platform", "android")]).status == .ok)
            #expect(try await proxy.get("/screens/elsewhere").status == .ok)

            let products = #"route="/screens/products/{id}",platform="IOS""#
            let expected = [
                "sdui_route_requests_total{\(products),cache=\"MISS\"} 3",
                "sdui_route_requests_total{\(products),cache=\"HIT\"} 1",
                #"sdui_route_requests_total{route="/screens/home",platform="ANDROID",cache="MISS"} 1"#,
                #"sdui_route_requests_total{route="other",platform="WEB",cache="MISS"} 1"#,
                "sdui_route_duration_seconds_count{\(products)} 4",
                "sdui_route_duration_seconds_bucket{\(products),le=\"+Inf\"} 4",
                // Buckets are cumulative: every one of these took less than the largest bound.
                "sdui_route_duration_seconds_bucket{\(products),le=\"10.0\"} 4",
            ]
            // Counted as each response ends, which the client may see a moment before.
            try await waitUntil {
                let text = try await proxy.admin("/metrics").body
                return expected.allSatisfy(text.contains)
            }
            let text = try await proxy.admin("/metrics").body
            let bytesLine = try #require(
                text.split(separator: "\n").first { $0.hasPrefix("sdui_route_response_bytes_total{\(products)}") }
            )
            #expect((Int(bytesLine.split(separator: " ").last ?? "") ?? 0) > 0)
            #expect(!text.contains(#"route="/screens/elsewhere""#))
        }
    }

    @Test("without templates there are no per-route series")
    func offByDefault() async throws {
        try await ProxyHarness.run { proxy in
            _ = try await proxy.get("/screens/home")
            #expect(!(try await proxy.admin("/metrics").body.contains("sdui_route_")))
        }
    }

    @Test("metrics made again at every reload share one thread slot: more reloads than the system has keys")
    func reloadsShareOneThreadSlot() throws {
        var configuration = ProxyConfiguration()
        configuration.metrics.routes = ["/screens/{id}"]
        // glibc has 1,024 thread-specific keys; a slot per metrics ran out, and the process stopped at a reload.
        var previous: RouteTally?
        for _ in 0..<1_500 {
            let metrics = try #require(RouteMetrics(configuration))
            let tally = metrics.tally()
            // The thread's tally is the metrics' own, the same at each response, and none of the metrics before.
            #expect(metrics.tally() === tally)
            #expect(previous.map { $0 !== tally } ?? true)
            previous = tally
        }
    }
}
