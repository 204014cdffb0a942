import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// What HTTP/1.1 requests get, on HTTP/2 streams: interim responses, coalescing of concurrent misses, the write
/// queue, and bodies streamed both ways on a route that streams them. Against real origins.
@Suite("HTTP/2 streams get every rule HTTP/1.1 requests get")
struct HTTP2ExchangeTests {
    @Test("RFC 9110 §15.2: a backend's 103 reaches an HTTP/2 client as a HEADERS frame of its own, before the answer")
    func interimResponse() async throws {
        let component = #"{"_beagleComponent_":"hinted"}"#
        let hinting: RawOrigin.Answer = { _ in
            (
                "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"
                    + "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
                    + "Content-Length: \(component.utf8.count)\r\n\r\n\(component)",
                false
            )
        }
        try await ProxyHarness.run(behind: hinting) { proxy, _ async throws in
            let client = try await RawConnection(port: proxy.server.publicPort)
            let received = try await client.http2Get("/screens/hinted")
            let blocks = try HTTP2Wire.headerBlocks(in: HTTP2Wire.frames(in: received)).filter { $0.stream == 1 }
            #expect(blocks.map { $0.headers.first(name: ":status") } == ["103", "200"])
            #expect(blocks.first?.headers.first(name: "link") == "</app.css>; rel=preload")
            await client.close()
        }
    }

    @Test("concurrent misses for one screen on one HTTP/2 connection are one fill")
    func coalescing() async throws {
        try await PublicTLSTests.run(origin: { _ in .component(delay: .milliseconds(300)) }) { proxy in
            let replies = try await withThrowingTaskGroup(of: HTTPResponseStatus.self) { group in
                for _ in 0..<8 { group.addTask { try await proxy.get("/screens/popular").reply.status } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies == Array(repeating: .ok, count: 8))
            #expect(proxy.harness.origin.requests(to: "/screens/popular").count == 1)
        }
    }

    @Test("a queued write over HTTP/2: kept when the backend cannot take it, its status read over HTTP/2 too")
    func queuedWrite() async throws {
        let refusing = NIOLockedValueBox(true)
        let directory = WriteQueueProxyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let origin: TestOrigin.Responder = { _ in
            refusing.withLockedValue { $0 }
                ? TestOrigin.Response(
                    status: .serviceUnavailable,
                    headers: [("Content-Type", "text/plain")],
                    body: "busy"
                )
                : TestOrigin.Response(status: .created, headers: [], body: "ok")
        }
        try await PublicTLSTests.run(
            origin: origin,
            configure: { $0.queue = WriteQueueProxyTests.queueConfiguration(directory: directory) }
        ) { proxy in
            let (accepted, version) = try await proxy.get("/api/orders", method: .POST, body: #"{"n":1}"#)
            #expect(version == .http2)
            #expect(accepted.status == .accepted)
            #expect(accepted.body.contains(#""queued":true"#))
            let location = try #require(accepted["Location"])
            refusing.withLockedValue { $0 = false }
            try await waitUntil(timeout: .seconds(10)) {
                try await proxy.get(location).reply.body.contains("delivered")
            }
            let delivered = try #require(proxy.harness.origin.requests(to: "/api/orders").last)
            #expect(String(buffer: delivered.body) == #"{"n":1}"#)
        }
    }

    @Test("on a route that streams, an upload goes to the backend as it comes and a large answer comes back streamed")
    func streamedBothWays() async throws {
        let large = String(repeating: "0123456789", count: 100_000)
        let origin: TestOrigin.Responder = { request in
            request.method == .GET
                ? TestOrigin.Response(status: .ok, headers: [("Content-Type", "text/plain")], body: large)
                : TestOrigin.Response(status: .created, headers: [("Content-Type", "text/plain")], body: "stored")
        }
        try await PublicTLSTests.run(
            origin: origin,
            configure: { configuration in
                var policy = configuration.cache.policy
                policy.bypass = true
                policy.stream = true
                configuration.cache.routes.append(.init(prefix: "/files/", policy: policy))
                configuration.upstream.maxResponseBytes = 64 << 10
            }
        ) { proxy in
            let upload = String(repeating: "u", count: 2 << 20)
            let (stored, _) = try await proxy.get("/files/big", method: .PUT, body: upload)
            #expect(stored.status == .created)
            #expect(proxy.harness.origin.requests(to: "/files/big").last?.body.readableBytes == upload.utf8.count)
            let (download, version) = try await proxy.get("/files/big")
            #expect(version == .http2)
            #expect(download.status == .ok)
            #expect(download.body == large, "1 MB through a 64 KiB fill limit: streamed, not stored")
        }
    }
}
