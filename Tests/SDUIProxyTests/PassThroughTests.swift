import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Methods other than GET and HEAD are forwarded untouched")
struct PassThroughTests {
    @Test(
        "POST reaches the backend with its method, body and headers, and is never cached",
        arguments: [HTTPMethod.POST, .PUT, .PATCH, .DELETE, .OPTIONS]
    )
    func forwarded(method: HTTPMethod) async throws {
        try await ProxyHarness.run(origin: { request in
            TestOrigin.Response(
                status: .created,
                headers: [("Content-Type", "text/plain"), ("Cache-Control", "max-age=600"), ("X-Backend", "yes")],
                body: "got \(request.method) \(request.body.readableBytes) bytes"
            )
        }) { proxy async throws in
            let body = #"{"productId":2,"quantity":1}"#
            for _ in 0..<2 {
                let reply = try await proxy.get(
                    "/api/orders?source=app",
                    headers: [
                        ("Content-Type", "application/vnd.orders+json"), ("X-Request-Id", "abc"),
                        ("beagle-platform", "IOS"),
                    ],
                    method: method,
                    body: body
                )
                #expect(reply.status == .created)
                #expect(reply.body == "got \(method) \(body.utf8.count) bytes")
                #expect(reply["X-Backend"] == "yes")
                #expect(reply["X-Cache"] == nil)
            }
            let seen = proxy.origin.requests
            #expect(seen.count == 2)
            let first = try #require(seen.first)
            #expect(first.method == method)
            #expect(first.uri == "/api/orders?source=app")
            #expect(String(buffer: first.body) == body)
            #expect(first.headers.first(name: "content-type") == "application/vnd.orders+json")
            #expect(first.headers.first(name: "x-request-id") == "abc")
            #expect(first.headers.first(name: "beagle-platform") == "IOS")
        }
    }

    @Test("a backend answer without a length is sent on in chunks, and the connection goes on after it")
    func chunkedAnswer() async throws {
        try await ProxyHarness.run(origin: { request in
            var response = TestOrigin.Response(
                headers: [("Content-Type", "text/plain")],
                body: "answer to \(request.method) \(request.uri)"
            )
            response.chunked = true
            return response
        }) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send(
                "POST /api/a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
                    + "DELETE /api/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            let text = try await connection.readUntilClosed()
            await connection.close()
            let responses = text.components(separatedBy: "HTTP/1.1 200 OK\r\n").dropFirst()
            #expect(responses.count == 2, "\(text)")
            for (response, answer) in zip(responses, ["answer to POST /api/a", "answer to DELETE /api/b"]) {
                let lower = response.lowercased()
                #expect(lower.contains("transfer-encoding: chunked\r\n"))
                #expect(!lower.contains("content-length"))
                let size = String(answer.utf8.count, radix: 16)
                #expect(response.hasSuffix("\r\n\r\n\(size)\r\n\(answer)\r\n0\r\n\r\n"), "\(response)")
            }
        }
    }

    @Test("large bodies stream through in both directions")
    func largeBodies() async throws {
        let size = 6 << 20
        try await ProxyHarness.run(
            origin: { request in
                TestOrigin.Response(
                    status: .ok,
                    headers: [("Content-Type", "application/octet-stream")],
                    body: String(repeating: "r", count: request.body.readableBytes)
                )
            },
            configure: { $0.upstream.timeout = .seconds(30) }
        ) { proxy async throws in
            let reply = try await proxy.get("/upload", method: .PUT, body: String(repeating: "q", count: size))
            #expect(reply.status == .ok)
            #expect(reply.body.utf8.count == size)
            #expect(proxy.origin.requests.first?.body.readableBytes == size)
        }
    }

    @Test("hop-by-hop headers are not forwarded")
    func hopByHop() async throws {
        try await ProxyHarness.run(origin: { _ in TestOrigin.Response(status: .noContent, headers: [], body: "") }) {
            proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send(
                "POST /submit HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n"
                    + "Keep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\n{}"
            )
            let response = try #require(try await connection.readResponse())
            #expect(response.head.hasPrefix("HTTP/1.1 204"))
            await connection.close()
            let headers = try #require(proxy.origin.requests.first?.headers)
            #expect(!headers.contains(name: "x-secret"))
            #expect(!headers.contains(name: "keep-alive"))
            #expect(headers.first(name: "x-forwarded-for") == "127.0.0.1")
        }
    }

    /// An origin that answers how many body bytes it received.
    static let countsBody: TestOrigin.Responder = { request in
        TestOrigin.Response(status: .ok, headers: [], body: "got \(request.body.readableBytes)")
    }

    @Test("a slow upload is the client's time: upstream.timeout starts once the backend has the whole request")
    func slowUploadIsNotChargedToTheBackend() async throws {
        try await ProxyHarness.run(
            origin: Self.countsBody,
            // Long enough for a loaded machine to pass the last part on and answer it; the upload takes longer.
            configure: { $0.upstream.timeout = .seconds(3) }
        ) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            let piece = String(repeating: "x", count: 20_000)
            try await connection.send("POST /api/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n")
            // 200 KB over about 5 s: longer than the backend's timeout, all of it the client's.
            for _ in 0..<10 {
                try await connection.send(piece)
                try await Task.sleep(for: .milliseconds(500))
            }
            let response = try #require(try await connection.readResponse())
            #expect(response.head.hasPrefix("HTTP/1.1 200"), "\(response.head) \(response.body)")
            #expect(response.body == "got 200000")
            await connection.close()
        }
    }

    @Test("a backend slower than upstream.timeout after it has the whole body is a 504 of kind timeout")
    func slowBackendAfterTheBody() async throws {
        try await ProxyHarness.run(
            origin: { _ in TestOrigin.Response(status: .ok, headers: [], body: "late", delay: .seconds(10)) },
            configure: { $0.upstream.timeout = .milliseconds(300) }
        ) { proxy async throws in
            let started = ContinuousClock.now
            let reply = try await proxy.get("/api/orders", method: .POST, body: #"{"a":1}"#)
            #expect(reply.status == .gatewayTimeout)
            #expect(reply.body.contains(#""kind":"timeout""#))
            #expect(ContinuousClock.now - started < .seconds(8))
        }
    }

    @Test(
        "a body cut off by the request timeout never reaches the backend as a shorter request",
        arguments: ["Content-Length: 100000", "Transfer-Encoding: chunked"]
    )
    func truncatedBodyIsAborted(framing: String) async throws {
        try await ProxyHarness.run(
            origin: Self.countsBody,
            configure: { $0.limits.requestTimeout = .milliseconds(400) }
        ) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            let part = framing.hasPrefix("Content-Length") ? "partial body" : "c\r\npartial body\r\n"
            try await connection.send("POST /api/upload HTTP/1.1\r\nHost: x\r\n\(framing)\r\n\r\n" + part)
            _ = try await connection.readUntilClosed(timeout: .seconds(5))
            #expect(connection.isClosed)
            // The upstream request was aborted, not ended: the origin saw no complete request, only the one after.
            let after = try await proxy.get("/api/after", method: .POST, body: "{}")
            #expect(after.body == "got 2")
            #expect(proxy.origin.requests.map(\.uri) == ["/api/after"])
        }
    }

    @Test("an unreachable backend answers a forwarded request with a 502 error body")
    func unreachable() async throws {
        try await ProxyHarness.run { proxy async throws in
            try await proxy.origin.stop()
            let reply = try await proxy.get("/api/orders", method: .POST, body: "{}")
            #expect(reply.status == .badGateway)
            #expect(
                reply.body
                    == #"{"error":{"kind":"network","message":"cannot reach the backend: connection refused","retryable":true}}"#
            )
            try await proxy.origin.restart()
        }
    }
}
