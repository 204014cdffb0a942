import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing

@testable import SDUIProxy

@Suite("Admin responses in other formats than JSON")
struct AdminTextResponseTests {
    @Test("an endpoint can answer in the Prometheus text format with its own content type, over a real socket")
    func metricsContentType() async throws {
        let metrics = ProxyMetrics()
        metrics.requestCompleted(method: .GET, statusCode: 200, cacheResult: .hit)
        var router = AdminRouter()
        router.register(.GET, "/metrics") { _, eventLoop in
            eventLoop.makeSucceededFuture(AdminResponse(contentType: ProxyMetrics.contentType, body: metrics.render()))
        }
        router.register(.GET, "/health") { _, eventLoop in
            eventLoop.makeSucceededFuture(AdminResponse(json: #"{"status":"ok"}"#))
        }
        let logger = Logger(label: "test")
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { [router] channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    try sync.addHandler(NIOHTTPServerRequestAggregator(maxContentLength: 1 << 20))
                    try sync.addHandler(AdminHTTPHandler(router: router, logger: logger))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(server.localAddress?.port)
        let client = HTTPClient(eventLoopGroupProvider: .singleton)

        do {
            let response = try await client.execute(
                HTTPClientRequest(url: "http://127.0.0.1:\(port)/metrics"),
                timeout: .seconds(10)
            )
            let body = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(response.status == .ok)
            #expect(response.headers.first(name: "content-type") == "text/plain; version=0.0.4; charset=utf-8")
            #expect(body.contains(#"sdui_requests_total{method="GET",status_class="2xx",cache="HIT"} 1"#))

            let health = try await client.execute(
                HTTPClientRequest(url: "http://127.0.0.1:\(port)/health"),
                timeout: .seconds(10)
            )
            #expect(health.headers.first(name: "content-type") == "application/json")
            _ = try await health.body.collect(upTo: 1 << 20)
        } catch {
            try? await client.shutdown()
            try? await server.close()
            throw error
        }
        try await client.shutdown()
        try await server.close()
    }
}
