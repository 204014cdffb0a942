import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// `Docker/grafana/sdui-proxy.json` over the proxy's metrics: the dashboard parses, and every metric its queries
/// name is one a running proxy exposes. (No Grafana runs here: Debian has none, and CI has no Docker engine.)
@Suite("the Grafana dashboard")
struct GrafanaDashboardTests {
    static let docker = ProcessTests.repositoryRoot.appendingPathComponent("Docker")

    /// The metric names in the dashboard's queries, histogram suffixes taken off.
    static func metricNames() throws -> Set<String> {
        let data = try Data(contentsOf: docker.appendingPathComponent("grafana/sdui-proxy.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 10)
        var names: Set<String> = []
        for panel in panels {
            for target in panel["targets"] as? [[String: Any]] ?? [] {
                let expr = try #require(target["expr"] as? String)
                for match in expr.matches(of: /sdui_[a-z_]+/) {
                    var name = String(match.output)
                    for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
                        name = String(name.dropLast(suffix.count))
                    }
                    names.insert(name)
                }
            }
        }
        return names
    }

    @Test("every metric the dashboard queries is in a running proxy's /metrics")
    func queriesNameRealMetrics() async throws {
        let names = try Self.metricNames()
        #expect(names.contains("sdui_route_requests_total") && names.contains("sdui_requests_total"))
        let directory = WriteQueueProxyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await ProxyHarness.run(configure: {
            $0.metrics.routes = ["/screens/home", "/screens/products/{id}", "/screens/{name}"]
            $0.queue = WriteQueueProxyTests.queueConfiguration(directory: directory)
            $0.queue?.routes[0].creates = CreateRule(
                localId: .header("X-Local-Id"),
                remoteId: .json(JSONPointer("/id")!)
            )
        }) { proxy in
            _ = try await proxy.get("/screens/home")
            _ = try await proxy.get("/screens/home")
            // A backend that cannot be reached once, so that the errors' counter exists.
            try await proxy.origin.stop()
            #expect(try await proxy.get("/screens/unreachable").status == .badGateway)
            try await proxy.origin.restart()
            #expect(
                try await proxy.admin("/prefetch", method: .POST, body: #"{"urls":["/screens/cart"]}"#).status == .ok
            )
            let metrics = try await proxy.admin("/metrics").body
            for name in names.sorted() {
                #expect(
                    metrics.contains("# TYPE \(name) "),
                    "the dashboard queries \(name), which the proxy does not expose"
                )
            }
        }
    }

    @Test("Prometheus reads the admin token from a file; the compose file provisions both and counts routes")
    func composeAndScrapeConfiguration() throws {
        let prometheus = try String(
            contentsOf: Self.docker.appendingPathComponent("prometheus/prometheus.yml"),
            encoding: .utf8
        )
        #expect(prometheus.contains("credentials_file: /run/secrets/admin_token"))
        #expect(prometheus.contains("proxy:9090"))
        let compose = try String(contentsOf: Self.docker.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        for piece in ["prometheus:", "grafana:", "./grafana/sdui-proxy.json", "environment: SDUI_PROXY_ADMIN_TOKEN"] {
            #expect(compose.contains(piece), "\(piece)")
        }
        let routes = try #require(
            compose.split(separator: "\n").first { $0.contains("SDUI_PROXY_METRICS_ROUTES:") }?
                .split(separator: ":", maxSplits: 1).last
        )
        let yaml = "upstream: { url: \"http://backend:8081\" }\n"
        let configuration = try ConfigurationLoader(environment: [
            "SDUI_PROXY_METRICS_ROUTES": String(routes).trimmingCharacters(in: .whitespaces).trimmingCharacters(
                in: CharacterSet(charactersIn: "\"")
            )
        ]).load(yaml: yaml)
        #expect(configuration.metrics.routes.count == 3)
    }
}
