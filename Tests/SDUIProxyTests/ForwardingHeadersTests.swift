import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Forwarding headers: what the proxy saw, not what a client claims")
struct ForwardingHeadersTests {
    /// A backend that builds its links from the host it is told about, as many do.
    static let linkBuilder: TestOrigin.Responder = { request in
        let host = request.headers.first(name: "x-forwarded-host") ?? "backend.internal"
        return TestOrigin.Response.component(extra: #","link":"http://\#(host)/screens/next""#)
    }

    @Test("a client's X-Forwarded-Host cannot poison the stored screen every client gets")
    func poisoningRefused() async throws {
        try await ProxyHarness.run(origin: Self.linkBuilder) { proxy async throws in
            let first = try await proxy.get(
                "/screens/home",
                headers: [("X-Forwarded-Host", "evil.example"), ("Forwarded", "host=evil.example")]
            )
            #expect(first["X-Cache"] == "MISS")
            #expect(!first.body.contains("evil.example"))
            let second = try await proxy.get("/screens/home")
            #expect(second["X-Cache"] == "HIT")
            #expect(second.body.contains("http://backend.internal/screens/next"))

            let sent = try #require(proxy.origin.requests.first?.headers)
            #expect(!sent.contains(name: "x-forwarded-host"))
            #expect(sent["forwarded"] == ["for=127.0.0.1;proto=http"])
            #expect(sent["x-forwarded-for"] == ["127.0.0.1"])
            #expect(sent["x-forwarded-proto"] == ["http"])
        }
    }

    @Test("forwarded requests carry the proxy's own X-Forwarded-* and Forwarded, the client's Host included")
    func passThroughReplacesClaims() async throws {
        try await ProxyHarness.run(origin: { _ in TestOrigin.Response(status: .noContent, headers: [], body: "") }) {
            proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send(
                "POST /submit HTTP/1.1\r\nHost: app.example\r\nX-Forwarded-For: 10.9.9.9\r\n"
                    + "X-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\nX-Real-IP: 10.9.9.9\r\n"
                    + "Content-Length: 2\r\n\r\n{}"
            )
            let response = try #require(try await connection.readResponse())
            #expect(response.head.hasPrefix("HTTP/1.1 204"))
            await connection.close()
            let sent = try #require(proxy.origin.requests.first?.headers)
            #expect(sent["x-forwarded-for"] == ["127.0.0.1"])
            #expect(sent["x-forwarded-host"] == ["app.example"])
            #expect(sent["x-forwarded-proto"] == ["http"])
            #expect(sent["forwarded"] == ["for=127.0.0.1;proto=http;host=app.example"])
            #expect(!sent.contains(name: "x-real-ip"))
        }
    }

    @Test("from an address in listen.trustedProxies, the forwarding headers are kept and this hop appended")
    func trustedProxyAppends() async throws {
        try await ProxyHarness.run(
            origin: { _ in TestOrigin.Response(status: .noContent, headers: [], body: "") },
            configure: { $0.trustedProxies = [IPAddressRange("127.0.0.0/8")!] }
        ) { proxy async throws in
            let reply = try await proxy.get(
                "/submit",
                headers: [
                    ("X-Forwarded-For", "198.51.100.4"), ("X-Forwarded-Proto", "https"),
                    ("X-Forwarded-Host", "app.example"), ("Forwarded", "for=198.51.100.4;proto=https"),
                ],
                method: .POST,
                body: "{}"
            )
            #expect(reply.status == .noContent)
            let sent = try #require(proxy.origin.requests.first?.headers)
            #expect(sent["x-forwarded-for"] == ["198.51.100.4, 127.0.0.1"])
            #expect(sent["x-forwarded-proto"] == ["https"])
            #expect(sent["x-forwarded-host"] == ["app.example"])
            #expect(
                sent["forwarded"].first?.hasPrefix("for=198.51.100.4;proto=https, for=127.0.0.1;proto=http;host=")
                    == true
            )
        }
    }

    @Test("a reload that removes a trusted proxy is in force on its open keep-alive connections")
    func reloadRevokesTrust() async throws {
        try await ProxyHarness.run(
            origin: { _ in TestOrigin.Response(status: .noContent, headers: [], body: "") },
            configure: { $0.trustedProxies = [IPAddressRange("127.0.0.0/8")!] }
        ) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            let request =
                "POST /submit HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.4\r\nContent-Length: 2\r\n\r\n{}"
            try await connection.send(request)
            #expect(try await connection.readResponse()?.head.hasPrefix("HTTP/1.1 204") == true)
            var configuration = proxy.server.context.configuration
            configuration.trustedProxies = []
            try await proxy.server.reload(configuration)
            try await connection.send(request)
            #expect(try await connection.readResponse()?.head.hasPrefix("HTTP/1.1 204") == true)
            await connection.close()
            let sent = proxy.origin.requests.map { $0.headers["x-forwarded-for"] }
            #expect(sent == [["198.51.100.4, 127.0.0.1"], ["127.0.0.1"]])
        }
    }

    @Test("a route keyed on Host sends the Host to the backend, and each Host has its own entry")
    func hostKeyedRoute() async throws {
        try await ProxyHarness.run(
            origin: Self.linkBuilder,
            configure: { $0.cache.policy.vary = ["host"] }
        ) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            for host in ["a.example", "b.example", "a.example"] {
                try await connection.send("GET /screens/home HTTP/1.1\r\nHost: \(host)\r\n\r\n")
                let response = try #require(try await connection.readResponse())
                #expect(response.body.contains("http://\(host)/screens/next"))
            }
            await connection.close()
            #expect(proxy.origin.requestCount == 2)
        }
    }
}
