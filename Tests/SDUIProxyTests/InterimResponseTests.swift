import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Interim responses (RFC 9110 section 15.2) on cache fills and forwarded requests, against a raw origin over loopback: NIO's encoder
/// writes no 103 ahead of a final response, so the origin writes its bytes itself.
@Suite("RFC 9110 §15.2: interim responses")
struct InterimResponseTests {
    private static let component = #"{"_beagleComponent_":"hinted"}"#

    /// 100 Continue, then 103 Early Hints with a Link, then the component.
    private static let hinting: RawOrigin.Answer = { _ in
        (
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"
                + "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
                + "Content-Length: \(component.utf8.count)\r\n\r\n\(component)",
            false
        )
    }

    @Test("RFC 9110 §15.2: a fill's 1xx reach its client as they come; not stored, not merged, not replayed on a hit")
    func earlyHints() async throws {
        try await ProxyHarness.run(behind: Self.hinting) { proxy, origin async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("GET /screens/a HTTP/1.1\r\nHost: x\r\n\r\n")
            let proceed = try #require(try await connection.readResponse(bodyless: true))
            #expect(proceed.head == "HTTP/1.1 100 Continue")
            let hints = try #require(try await connection.readResponse(bodyless: true))
            #expect(hints.head == "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload")
            let final = try #require(try await connection.readResponse())
            #expect(final.head.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(!final.head.contains("Link:"), "the interim fields are not merged into the final response")
            #expect(final.body == Self.component)

            try await connection.send("GET /screens/a HTTP/1.1\r\nHost: x\r\n\r\n")
            let hit = try #require(try await connection.readResponse())
            #expect(hit.head.hasPrefix("HTTP/1.1 200 OK\r\n"), "a hit is the stored 200, without the hints")
            #expect(hit.head.contains("\r\nX-Cache: HIT\r\n"))
            #expect(!hit.head.contains("Link:"))
            await connection.close()
        }
    }

    @Test("RFC 9110 §15.2: a forwarded request's 1xx reach its client as they come: an unsafe method, a bypass route")
    func forwarded() async throws {
        let configure: @Sendable (inout ProxyConfiguration) -> Void = {
            ProxyHarness.bypassingCache(under: "/live", in: &$0)
        }
        try await ProxyHarness.run(behind: Self.hinting, configure: configure) { proxy, origin async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            for request in [
                "POST /screens/form HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                "GET /live/feed HTTP/1.1\r\nHost: x\r\n\r\n",
            ] {
                try await connection.send(request)
                let proceed = try #require(try await connection.readResponse(bodyless: true))
                #expect(proceed.head == "HTTP/1.1 100 Continue", "\(request)")
                let hints = try #require(try await connection.readResponse(bodyless: true))
                #expect(hints.head == "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload", "\(request)")
                let final = try #require(try await connection.readResponse())
                #expect(final.head.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(request)")
                #expect(!final.head.contains("Link:"), "the interim fields are not merged into the final response")
                #expect(final.body == Self.component)
            }
            #expect(origin.requestLines == ["POST /screens/form", "GET /live/feed"])
            #expect(origin.bodies.first == "hello")
            await connection.close()
        }
    }

    @Test(
        "RFC 9110 §10.1.1: on a streaming route, Expect: 100-continue reaches the backend, and its 100 the client"
    )
    func expectContinue() async throws {
        // A body read whole is the proxy's to ask for (RequestBufferingTests); a streamed one, the backend's.
        let streaming: @Sendable (inout ProxyConfiguration) -> Void = { configuration in
            var policy = configuration.cache.policy
            policy.bypass = true
            policy.stream = true
            configuration.cache.routes.append(.init(prefix: "/screens/form", policy: policy))
        }
        try await ProxyHarness.run(behind: RawOrigin.componentOrNoContent, configure: streaming) {
            proxy,
            origin async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send(
                "POST /screens/form HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            )
            // The client sends its body only once told to go on: the 100 can come from the backend alone.
            let proceed = try #require(try await connection.readResponse(bodyless: true))
            #expect(proceed.head == "HTTP/1.1 100 Continue")
            try await connection.send("hello")
            let final = try #require(try await connection.readResponse(bodyless: true))
            #expect(final.head.hasPrefix("HTTP/1.1 204 No Content"))
            #expect(origin.bodies == ["hello"])
            await connection.close()
        }
    }

    @Test("RFC 9110 §15.2: an HTTP/1.0 client is never sent an interim response")
    func notToHTTP10() async throws {
        try await ProxyHarness.run(behind: Self.hinting) { proxy, origin async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("GET /screens/b HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
            let final = try #require(try await connection.readResponse())
            #expect(final.head.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(final.head)")
            #expect(final.body == Self.component)
            // A forwarded request's as well.
            try await connection.send("POST /screens/form HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
            let forwarded = try #require(try await connection.readResponse())
            #expect(forwarded.head.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(forwarded.head)")
            #expect(forwarded.body == Self.component)
            await connection.close()
        }
    }
}
