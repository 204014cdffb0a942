import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// How the backend's response body is read (RFC 9112 section 6.3): `upstream.timeout` until the head, then
/// `upstream.bodyIdleTimeout` for each silence; a body that runs to the close; Transfer-Encoding never kept.
@Suite("RFC 9112 §6.3: reading the backend's body")
struct UpstreamBodyTests {
    private static let body = #"{"_beagleComponent_":"slow","padding":"0123456789012345678901234567890123456789"}"#

    /// A component whose body comes in four pieces `gap` apart.
    private static func slowBody(gap: TimeAmount) -> TestOrigin.Responder {
        { _ in
            var response = TestOrigin.Response.component()
            response.body = Self.body
            response.bodyPieces = 4
            response.pieceGap = gap
            return response
        }
    }

    @Test("a body that keeps coming may take longer than upstream.timeout: a cache fill and a streamed forward")
    func slowBodyWithinIdleLimit() async throws {
        try await ProxyHarness.run(
            // Four pieces 1.2 s apart: longer than the head's 3 s in all, each silence well within the idle limit.
            origin: Self.slowBody(gap: .milliseconds(1200)),
            configure: { configuration in
                configuration.upstream.timeout = .seconds(3)
                configuration.upstream.bodyIdleTimeout = .seconds(5)
                ProxyHarness.bypassingCache(under: "/live", in: &configuration)
            }
        ) { proxy async throws in
            let filled = try await proxy.get("/a")
            #expect(filled.status == .ok)
            #expect(filled.body == Self.body)
            #expect(filled["X-Cache"] == "MISS")
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
            let streamed = try await proxy.get("/live/a")
            #expect(streamed.status == .ok)
            #expect(streamed.body == Self.body)
        }
    }

    @Test("a body that stops for upstream.bodyIdleTimeout fails: a fill gets a 504 and stores nothing")
    func stalledFill() async throws {
        try await ProxyHarness.run(
            origin: Self.slowBody(gap: .seconds(4)),
            configure: { $0.upstream.bodyIdleTimeout = .milliseconds(500) }
        ) { proxy async throws in
            let stalled = try await proxy.get("/a")
            #expect(stalled.status == .gatewayTimeout)
            #expect(stalled.body.contains("stopped sending"))
            #expect(stalled["Cache-Status"] == "sdui-proxy; fwd=uri-miss; detail=timeout")
        }
    }

    @Test("a streamed body that stops for upstream.bodyIdleTimeout is cut short, never passed as complete")
    func stalledStream() async throws {
        try await ProxyHarness.run(
            origin: Self.slowBody(gap: .seconds(4)),
            configure: { configuration in
                configuration.upstream.bodyIdleTimeout = .milliseconds(500)
                ProxyHarness.bypassingCache(under: "/live", in: &configuration)
            }
        ) { proxy async throws in
            await #expect(throws: (any Error).self) { try await proxy.get("/live/a") }
        }
    }

    @Test("RFC 9112 §6.3: a body without a length ends at the close; Transfer-Encoding is neither stored nor sent")
    func closeDelimited() async throws {
        let answers: RawOrigin.Answer = { line in
            if line.hasPrefix("GET /coded") {
                return (
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: max-age=60\r\n"
                        + "Transfer-Encoding: gzip\r\n\r\nnot really gzip",
                    true
                )
            }
            return (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n\r\n"
                    + #"{"_beagleComponent_":"closed"}"#,
                true
            )
        }
        try await ProxyHarness.run(behind: answers) { proxy, origin async throws in
            for path in ["/plain", "/coded"] {
                let miss = try await proxy.get(path)
                let hit = try await proxy.get(path)
                #expect(miss.status == .ok)
                #expect(hit["X-Cache"] == "HIT", "\(path)")
                #expect(hit.body == miss.body)
                #expect(hit.body == (path == "/plain" ? #"{"_beagleComponent_":"closed"}"# : "not really gzip"))
                for reply in [miss, hit] {
                    #expect(reply.headers["transfer-encoding"].allSatisfy { $0 == "chunked" }, "\(path)")
                    #expect(reply["Content-Length"] == String(reply.body.utf8.count), "\(path)")
                }
            }
            #expect(origin.requestLines == ["GET /plain", "GET /coded"])
        }
    }
}
