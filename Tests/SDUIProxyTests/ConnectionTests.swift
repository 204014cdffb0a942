import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Connections: keep-alive, pipelining, the admin listener, shutdown")
struct ConnectionTests {
    @Test("many requests on one keep-alive connection")
    func keepAlive() async throws {
        try await ProxyHarness.run { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            for index in 0..<50 {
                try await connection.send("GET /screens/\(index % 5) HTTP/1.1\r\nHost: x\r\n\r\n")
                let response = try #require(try await connection.readResponse())
                #expect(response.head.hasPrefix("HTTP/1.1 200"))
                #expect(response.head.contains(index < 5 ? "X-Cache: MISS" : "X-Cache: HIT"))
            }
            #expect(!connection.isClosed)
            await connection.close()
            #expect(proxy.origin.requestCount == 5)
        }
    }

    @Test("pipelined requests are answered in order")
    func pipelining() async throws {
        try await ProxyHarness.run(origin: { request in
            // Later requests answer sooner, so order can only come from the proxy.
            var response = TestOrigin.Response.component(extra: #","uri":"\#(request.uri)""#)
            response.delay = .milliseconds(request.uri.hasSuffix("0") ? 200 : 0)
            return response
        }) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            let batch =
                (0..<8).map { "GET /p/\($0) HTTP/1.1\r\nHost: x\r\n\r\n" }.joined()
                + "HEAD /p/1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p/0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            try await connection.send(batch)
            for index in 0..<8 {
                let response = try #require(try await connection.readResponse())
                #expect(response.body.contains(#""uri":"/p/\#(index)""#))
            }
            let head = try #require(try await connection.readResponse(bodyless: true))
            #expect(head.head.contains("X-Cache: HIT"))
            let last = try #require(try await connection.readResponse())
            #expect(last.head.contains("Connection: close"))
            #expect(last.body.contains(#""uri":"/p/0""#))
            _ = try await connection.readUntilClosed()
        }
    }

    @Test("pipelined hits composed in one read burst each keep their own bytes")
    func pipelinedHitsInOneBurst() async throws {
        try await ProxyHarness.run(origin: { request in
            TestOrigin.Response.component(extra: #","uri":"\#(request.uri)""#)
        }) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            for index in 0..<3 {
                try await connection.send("GET /burst/\(index) HTTP/1.1\r\nHost: x\r\n\r\n")
                _ = try #require(try await connection.readResponse())
            }
            // One send, so the proxy reads them together and composes each hit while the ones before it still
            // wait for the burst's flush.
            let order = [2, 0, 1, 1, 2, 0, 2]
            try await connection.send(order.map { "GET /burst/\($0) HTTP/1.1\r\nHost: x\r\n\r\n" }.joined())
            for index in order {
                let response = try #require(try await connection.readResponse())
                #expect(response.head.contains("X-Cache: HIT"))
                #expect(response.body.contains(#""uri":"/burst/\#(index)""#))
            }
            await connection.close()
            #expect(proxy.origin.requestCount == 3)
        }
    }

    @Test("requests that arrive in pieces, split anywhere, are answered as if they had arrived whole")
    func requestsInPieces() async throws {
        try await ProxyHarness.run(origin: { request in
            var response = TestOrigin.Response.component(extra: #","uri":"\#(request.uri)""#)
            response.body = request.method == .POST ? "got \(String(buffer: request.body))" : response.body
            return response
        }) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            let get = "GET /pieces/a HTTP/1.1\r\nHost: x\r\nX-Long: \(String(repeating: "v", count: 300))\r\n\r\n"
            let post =
                "POST /pieces/b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            // Each piece is its own read: inside the request line, a header, the blank line, a chunk size and
            // a chunk, and the next request's head starting in the same piece as the last one's end.
            let text = get + post + get
            let cuts =
                [1, 5, 14, 40, 200, 330, 331, get.utf8.count - 1, get.utf8.count + 30, get.utf8.count + 75]
                + [get.utf8.count + 80, get.utf8.count + post.utf8.count - 2, get.utf8.count + post.utf8.count + 3]
            var start = text.utf8.startIndex
            for cut in cuts + [text.utf8.count] {
                let end = text.utf8.index(text.utf8.startIndex, offsetBy: cut)
                try await connection.send(String(text.utf8[start..<end])!)
                start = end
                try await Task.sleep(for: .milliseconds(15))
            }
            let first = try #require(try await connection.readResponse())
            #expect(first.head.hasPrefix("HTTP/1.1 200"))
            #expect(first.head.contains("X-Cache: MISS"))
            #expect(first.body.contains(#""uri":"/pieces/a""#))
            let forwarded = try #require(try await connection.readResponse())
            #expect(forwarded.body == "got hello world")
            let again = try #require(try await connection.readResponse())
            #expect(again.head.contains("X-Cache: HIT"))
            #expect(!connection.isClosed)
            #expect(proxy.origin.requestCount == 2)
            await connection.close()
        }
    }

    @Test("a miss whose client left still ends its fetch: the entry is stored and a waiter gets the answer")
    func missOutlivesItsClient() async throws {
        try await ProxyHarness.run(origin: { _ in .component(delay: .seconds(1)) }) { proxy async throws in
            let connection = try await missInFlight("/left/1", on: proxy)
            await connection.close()

            // Joins the fetch the departed client led (a second earlier it would be a hit on what that fetch
            // stored): had the fetch not ended its coalesced run, this request would fetch again after waiting.
            let waiter = try await proxy.get("/left/1")
            #expect(waiter.status == .ok)
            #expect(["MISS", "HIT"].contains(waiter.headers.first(name: "X-Cache")))
            let hit = try await proxy.get("/left/1")
            #expect(hit.headers.first(name: "X-Cache") == "HIT")
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("malformed bytes while a miss is in flight: the miss is answered with Connection: close, then it closes")
    func malformedDuringMiss() async throws {
        let gate = OriginGate()
        defer { gate.open() }
        try await ProxyHarness.run(origin: { _ in .component(heldBy: gate) }) { proxy async throws in
            let connection = try await missInFlight("/broken/1", on: proxy)
            try await connection.send("THIS IS NOT HTTP\r\n\r\n")
            gate.open()
            // The request read before the malformed bytes is answered; nothing after them can be trusted, so
            // that answer is the connection's last and no 400 follows it.
            let answer = try await connection.readUntilClosed()
            #expect(answer.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(answer.contains("\r\nX-Cache: MISS\r\n"))
            #expect(answer.contains("\r\nConnection: close\r\n"))
            // A status line, not the digits anywhere: the random request id can hold "400".
            #expect(!answer.contains("HTTP/1.1 400"))
            #expect(answer.components(separatedBy: "HTTP/1.1 ").count == 2)

            #expect(try await proxy.get("/broken/1").headers.first(name: "X-Cache") == "HIT")
            #expect(proxy.origin.requestCount == 1)
        }
    }

    /// A connection whose GET for `path` is a miss the origin has received and not yet answered.
    private func missInFlight(_ path: String, on proxy: ProxyHarness) async throws -> RawConnection {
        let connection = try await RawConnection(port: proxy.server.publicPort)
        try await connection.send("GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n")
        try await waitUntil { proxy.origin.requestCount == 1 }
        return connection
    }

    @Test("malformed HTTP gets a 400 and the connection is closed")
    func malformed() async throws {
        try await ProxyHarness.run { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("THIS IS NOT HTTP\r\n\r\n")
            let rest = try await connection.readUntilClosed()
            #expect(rest.hasPrefix("HTTP/1.1 400"))
            #expect(proxy.origin.requestCount == 0)
        }
    }

    @Test("the admin listener answers /health, and admin paths are not served on the public listener")
    func adminHealth() async throws {
        try await ProxyHarness.run(origin: { _ in TestOrigin.Response(status: .notFound, body: "origin 404") }) {
            proxy async throws in
            let health = try await proxy.admin("/health")
            #expect(health.status == .ok)
            #expect(health.body == #"{"status":"ok"}"#)
            #expect(try await proxy.admin("/nope").status == .notFound)
            #expect(try await proxy.admin("/health", method: .DELETE).status == .methodNotAllowed)

            let publicHealth = try await proxy.get("/health")
            #expect(publicHealth.body == "origin 404")
        }
    }

    /// Bytes sent in one write, so read at once: a request the proxy must answer last, and requests behind it.
    struct LastAnswer: Sendable, CustomTestStringConvertible {
        var testDescription: String
        var bytes: String
        var status: String
        var forwarded: [String]
    }

    @Test(
        "nothing behind an answer that ends the connection is handled or sent to the backend; the connection closes",
        arguments: [
            LastAnswer(
                testDescription: "malformed bytes",
                bytes: "GET /screens/1 HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n"
                    + "GET /screens/2 HTTP/1.1\r\nHost: x\r\n\r\n",
                status: "400",
                forwarded: []
            ),
            LastAnswer(
                testDescription: "Connection: close",
                bytes: "GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    + "POST /after HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
                    + "GET /after HTTP/1.1\r\nHost: x\r\n\r\n",
                status: "200",
                forwarded: ["/last"]
            ),
        ]
    )
    func nothingAfterTheLastAnswer(_ exchange: LastAnswer) async throws {
        try await ProxyHarness.run { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send(exchange.bytes)
            let rest = try await connection.readUntilClosed()
            #expect(rest.hasPrefix("HTTP/1.1 \(exchange.status)"))
            #expect(rest.components(separatedBy: "HTTP/1.1 ").count == 2, "one response only: \(rest)")
            #expect(proxy.origin.requests.map(\.uri) == exchange.forwarded)
        }
    }

    /// A proxy in front of `origin`, and a connection whose GET for `path` the proxy has read and sent on: it is
    /// waiting for the origin.
    private func requestInFlight(_ path: String, to origin: TestOrigin) async throws -> (ProxyServer, RawConnection) {
        let server = try await ProxyServer.start(
            configuration: ProxyHarness.testConfiguration(upstream: origin.url),
            logger: ProxyHarness.logger
        )
        let connection = try await RawConnection(port: server.publicPort)
        try await connection.send("GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n")
        try await waitUntil { origin.requestCount == 1 }
        return (server, connection)
    }

    @Test("past the drain deadline, shutdown closes the connections still open")
    func drainDeadline() async throws {
        let gate = OriginGate()
        defer { gate.open() }
        let origin = try await TestOrigin { _ in .component(heldBy: gate) }
        let (server, connection) = try await requestInFlight("/held", to: origin)
        // An admin request whose body has not all come: the admin listener would linger after answering it.
        let admin = try await RawConnection(port: server.adminPort, allowHalfClosure: true)
        try await admin.send("POST /prefetch HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        await server.shutdown(drainTimeout: .milliseconds(200))
        // The backend still holds its answer; the connection waiting for it is closed all the same.
        #expect(try await connection.readUntilClosed(timeout: .seconds(5)) == "")
        // Closed, not lingering: what the admin client sends from now on is refused.
        await #expect(throws: (any Error).self) {
            for _ in 0..<40 {
                try await admin.send("x")
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        await admin.close()
        gate.open()
        try await origin.stop()
    }

    @Test("shutdown stops accepting, finishes requests in flight, then closes")
    func gracefulShutdown() async throws {
        let origin = try await TestOrigin { _ in
            var response = TestOrigin.Response.component()
            response.delay = .milliseconds(600)
            return response
        }
        let (server, connection) = try await requestInFlight("/slow", to: origin)
        let shutdown = Task { await server.shutdown(drainTimeout: .seconds(5)) }
        // (Connecting again would prove nothing: tests run in parallel and another one may take the port.)
        try await waitUntil { !server.isAcceptingConnections }
        let response = try #require(try await connection.readResponse())
        #expect(response.head.hasPrefix("HTTP/1.1 200"))
        #expect(response.body.contains("beagle:screenComponent"))
        _ = try await connection.readUntilClosed()
        await shutdown.value
        try await origin.stop()
    }
}
