import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Request hardening on the public listener")
struct HardeningTests {
    static func limited(_ configuration: inout ProxyConfiguration) {
        configuration.limits.maxURLBytes = 64
        configuration.limits.maxHeaderBytes = 1024
        configuration.limits.maxHeaderCount = 20
        configuration.limits.maxBodyBytes = 1000
        configuration.limits.maxConnections = 3
    }

    /// Sends raw bytes, reads everything until the proxy closes the connection.
    static func exchange(_ proxy: ProxyHarness, _ bytes: String) async throws -> String {
        let connection = try await RawConnection(port: proxy.server.publicPort)
        // The proxy may answer and close before the request is out (a refused connection): keep what it sent.
        try? await connection.send(bytes)
        let answer = try await connection.readUntilClosed()
        await connection.close()
        return answer
    }

    @Test(
        "each limit is answered with its status and the error body, and nothing is forwarded",
        arguments: [
            ("GET /\(String(repeating: "a", count: 100)) HTTP/1.1\r\nHost: x\r\n\r\n", "414", "uriTooLong"),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "b", count: 2000))\r\n\r\n", "431",
                "headersTooLarge"
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\n" + (0..<30).map { "X-H\($0): v\r\n" }.joined() + "\r\n", "431",
                "headersTooLarge"
            ),
            ("POST /api HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", "413", "tooLarge"),
        ]
    )
    func limits(request: String, status: String, kind: String) async throws {
        try await ProxyHarness.run(configure: Self.limited) { proxy async throws in
            let answer = try await Self.exchange(proxy, request)
            #expect(answer.hasPrefix("HTTP/1.1 \(status)"), "\(answer.prefix(80))")
            #expect(answer.contains(#""kind":"\#(kind)""#))
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("a chunked body over the limit is cut off with 413")
    func chunkedBodyTooLarge() async throws {
        try await ProxyHarness.run(configure: Self.limited) { proxy async throws in
            let chunk = String(repeating: "z", count: 600)
            let request =
                "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                + "258\r\n\(chunk)\r\n258\r\n\(chunk)\r\n0\r\n\r\n"
            let answer = try await Self.exchange(proxy, request)
            #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer.prefix(80))")
            #expect(answer.contains(#""kind":"tooLarge""#))
        }
    }

    @Test(
        "request smuggling attempts are refused and the connection closed, never forwarded",
        arguments: [
            "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
            "GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
            "GET /a HTTP/1.1\r\n\r\n",
        ]
    )
    func smuggling(request: String) async throws {
        try await ProxyHarness.run(configure: Self.limited) { proxy async throws in
            let answer = try await Self.exchange(proxy, request + "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer.prefix(80))")
            #expect(!answer.contains("HTTP/1.1 200"))
            // The refused connection is closed: a request sent after it on a new one must reach the origin, and
            // nothing from the refused one may have come before it.
            #expect(try await proxy.get("/after").status == .ok)
            #expect(proxy.origin.requests.map(\.uri) == ["/after"])
        }
    }

    @Test("absolute-form targets for other hosts are refused; for this host they are served")
    func openProxy() async throws {
        try await ProxyHarness.run(configure: Self.limited) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("GET http://evil.example/steal HTTP/1.1\r\nHost: proxy.local\r\n\r\n")
            let refused = try #require(try await connection.readResponse())
            #expect(refused.head.hasPrefix("HTTP/1.1 400"))
            #expect(refused.body.contains("open proxy"))
            try await connection.send("GET http://proxy.local/screens/home HTTP/1.1\r\nHost: proxy.local\r\n\r\n")
            let served = try #require(try await connection.readResponse())
            #expect(served.head.hasPrefix("HTTP/1.1 200"))
            try await connection.send("CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
            let connect = try #require(try await connection.readResponse())
            #expect(!connect.head.hasPrefix("HTTP/1.1 2"))
            await connection.close()
            #expect(proxy.origin.requests.map(\.uri) == ["/screens/home"])
        }
    }

    @Test("a slow client is cut off: headers that never finish, and a body that never arrives")
    func slowClients() async throws {
        try await ProxyHarness.run(configure: { configuration in
            Self.limited(&configuration)
            configuration.limits.requestTimeout = .milliseconds(400)
            configuration.limits.idleTimeout = .milliseconds(400)
        }) { proxy async throws in
            // Every send may find the connection already closed when the machine is slow to run this test after
            // connecting (the timeouts are short): that is the cut-off this test expects, just early.
            let headers = try await RawConnection(port: proxy.server.publicPort)
            try? await headers.send("GET /screens/home HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            for _ in 0..<3 {
                try await Task.sleep(for: .milliseconds(150))
                try? await headers.send("a")
            }
            _ = try await headers.readUntilClosed(timeout: .seconds(3))
            #expect(headers.isClosed)

            let body = try await RawConnection(port: proxy.server.publicPort)
            try? await body.send("POST /api HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial")
            _ = try await body.readUntilClosed(timeout: .seconds(3))
            #expect(body.isClosed)

            let idle = try await RawConnection(port: proxy.server.publicPort)
            _ = try await idle.readUntilClosed(timeout: .seconds(3))
            #expect(idle.isClosed)
        }
    }

    @Test("a request head that stops half-way gets its 408 at limits.requestTimeout from its first byte")
    func slowHeadGetsRequestTimeout() async throws {
        try await ProxyHarness.run(configure: { configuration in
            configuration.limits.requestTimeout = .milliseconds(500)
            // Far beyond the request timeout: the 408 must not wait for the idle timer.
            configuration.limits.idleTimeout = .seconds(30)
        }) { proxy async throws in
            let started = ContinuousClock.now
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("GET /screens/home HTTP/1.1\r\nHost: x\r\nX-Slow: a")
            let response = try #require(try await connection.readResponse(timeout: .seconds(10)))
            #expect(response.head.hasPrefix("HTTP/1.1 408"))
            #expect(response.body.contains(#""kind":"requestTimeout""#))
            #expect(ContinuousClock.now - started < .seconds(10))
            _ = try await connection.readUntilClosed(timeout: .seconds(5))
            #expect(connection.isClosed)
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("connections over limits.maxConnections get 503 and are closed")
    func connectionLimit() async throws {
        try await ProxyHarness.run(configure: Self.limited) { proxy async throws in
            var open: [RawConnection] = []
            for _ in 0..<3 {
                let connection = try await RawConnection(port: proxy.server.publicPort)
                try await connection.send("GET /screens/home HTTP/1.1\r\nHost: x\r\n\r\n")
                #expect(try await connection.readResponse()?.head.hasPrefix("HTTP/1.1 200") == true)
                open.append(connection)
            }
            let refused = try await Self.exchange(proxy, "GET /screens/home HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(refused.hasPrefix("HTTP/1.1 503"))
            #expect(refused.contains(#""kind":"unavailable""#))
            await open[0].close()
            // The slot comes free when the proxy has seen the close, which takes a moment on a loaded machine.
            var admitted: RawConnection?
            try await waitUntil {
                let connection = try await RawConnection(port: proxy.server.publicPort)
                try? await connection.send("GET /screens/home HTTP/1.1\r\nHost: x\r\n\r\n")
                if try await connection.readResponse()?.head.hasPrefix("HTTP/1.1 200") == true {
                    admitted = connection
                    return true
                }
                await connection.close()
                return false
            }
            #expect(admitted != nil)
            for connection in open.dropFirst() { await connection.close() }
            await admitted?.close()
        }
    }

    /// Which listener a refused upload goes to, and what refuses it there.
    enum RefusedUpload: String, CaseIterable, CustomTestStringConvertible {
        case publicTooLarge, adminWithoutToken, adminTooLarge
        var testDescription: String { rawValue }
    }

    @Test(
        "a refused upload still gets its answer: the rest of its body is read and dropped, then the connection closes",
        arguments: RefusedUpload.allCases
    )
    func refusedUploadKeepsItsAnswer(_ upload: RefusedUpload) async throws {
        try await ProxyHarness.run(configure: Self.limited, adminToken: "s3cret") { proxy async throws in
            // 16 MiB: more than the sockets' buffers hold, so the client is still sending when the answer comes.
            let bodyBytes = 16 << 20
            let (port, head, status) =
                switch upload {
                case .publicTooLarge:
                    (proxy.server.publicPort, "POST /api HTTP/1.1\r\nHost: x\r\n", "413")
                case .adminWithoutToken:
                    (proxy.server.adminPort, "POST /prefetch HTTP/1.1\r\nHost: x\r\n", "401")
                case .adminTooLarge:
                    (
                        proxy.server.adminPort,
                        "POST /prefetch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n",
                        "413"
                    )
                }
            let connection = try await RawConnection(port: port, allowHalfClosure: true)
            try await connection.send(head + "Content-Length: \(bodyBytes)\r\n\r\n")
            // Closing with the body unread would reset the connection: this send would fail, and a client that
            // stops at a failed send never reads the answer.
            try await connection.send(ByteBuffer(repeating: UInt8(ascii: "x"), count: bodyBytes))
            let answer = try #require(try await connection.readResponse())
            #expect(answer.head.hasPrefix("HTTP/1.1 \(status)"), "\(answer.head)")
            // The end of the server's side may arrive a moment after the answer it follows.
            try await waitUntil(timeout: .seconds(5)) { connection.serverClosedItsSide }
            #expect(connection.serverClosedItsSide)
            if upload == .publicTooLarge {
                // One more byte, which the lingering close reads and drops: its quiet timer starts again now, so
                // it cannot be what closes the connection in the next four seconds, however long the waits above.
                try await connection.send("x")
            }
            #expect(try await Self.openPublicConnections(proxy) == (upload == .publicTooLarge ? 1 : 0))
            try await connection.closeOutput()
            try await Self.waitForOpenPublicConnections(0, proxy)
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("a lingering close is not cut short by the idle timeout while the client still sends")
    func idleTimeoutLeavesTheLingerAlone() async throws {
        try await ProxyHarness.run(
            // The backend answers late, so the proxy's 413 is always the answer (an answer the backend had begun
            // to stream would be cut short instead).
            origin: { _ in .component(delay: .seconds(5)) },
            configure: {
                Self.limited(&$0)
                // Four seconds: a machine running the whole suite may take two between connecting and the proxy
                // reading the request.
                $0.limits.idleTimeout = .seconds(4)
            }
        ) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort, allowHalfClosure: true)
            // Chunked, so the body is refused when it passes the limit, not on its head.
            let chunk = "3e8\r\n" + String(repeating: "x", count: 1000) + "\r\n"
            try await connection.send(
                "POST /api HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk
            )
            let answer = try #require(try await connection.readResponse())
            #expect(answer.head.hasPrefix("HTTP/1.1 413"))
            // Past the idle timeout, the client is still sending its body: it must not be reset.
            for _ in 0..<20 {
                try await connection.send(String(repeating: chunk, count: 10))
                try await Task.sleep(for: .milliseconds(250))
            }
            try await connection.closeOutput()
        }
    }

    static func openPublicConnections(_ proxy: ProxyHarness) async throws -> Int? {
        let metrics = try await proxy.admin("/metrics", headers: [("Authorization", "Bearer s3cret")]).body
        // Every protocol's count, `setup` included.
        let counts = metrics.split(separator: "\n").filter { $0.hasPrefix("sdui_open_connections{") }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
        return counts.isEmpty ? nil : Int(counts.reduce(0, +))
    }

    static func waitForOpenPublicConnections(_ count: Int, _ proxy: ProxyHarness) async throws {
        // Shorter than the lingering close's quiet timeout, so only the client's end of stream can close it.
        let deadline = ContinuousClock.now + .seconds(4)
        while try await openPublicConnections(proxy) != count {
            guard ContinuousClock.now < deadline else {
                Issue.record("open connections stayed at \(try await openPublicConnections(proxy) ?? -1)")
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
