import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The public listener's connection handler driven directly: bytes in on an `EmbeddedChannel`, a scripted backend
/// that answers when the test says so, and the bytes the handler writes back read and parsed.
@Suite("The public connection handler: ordering, keep-alive, deadlines, refusals, drains, forwards")
struct PublicHTTPHandlerTests {
    private static func component(_ text: String) -> String {
        #"{"_beagleComponent_":"beagle:text","text":"\#(text)"}"#
    }

    private static func componentHeaders(etag: String) -> HTTPHeaders {
        ["Content-Type": "application/json", "Cache-Control": "max-age=300", "ETag": etag]
    }

    /// The cache's lines at the end of a head: `X-Cache` and `Cache-Status`.
    private static func cacheLines(_ xCache: String, _ cacheStatus: String) -> String {
        "\r\nX-Cache: \(xCache)\r\nCache-Status: sdui-proxy; \(cacheStatus)\r\n"
    }

    private static let missLines = cacheLines("MISS", "fwd=uri-miss; fwd-status=200; ttl=300; stored")
    private static let hitLines = cacheLines("HIT", "hit; ttl=300")

    private static func get(_ path: String, _ extraHeaders: String = "") -> String {
        "GET \(path) HTTP/1.1\r\nHost: app.example\r\n\(extraHeaders)\r\n"
    }

    /// Stores `path` through the connection: a GET, the backend's answer, the MISS read back.
    @discardableResult
    private static func fill(
        _ path: String,
        text: String,
        on connection: EmbeddedPublicConnection
    ) throws
        -> WrittenResponse
    {
        try connection.send(get(path))
        try connection.backend.answerFetch(headers: componentHeaders(etag: "\"\(text)-1\""), body: component(text))
        let response = try #require(try connection.readResponse())
        #expect(response.headers["x-cache"] == ["MISS"])
        return response
    }

    // MARK: Keep-alive and order

    @Test("a miss is answered once the backend answers, then the same request at once from memory, kept alive")
    func missThenHit() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/home"))
            #expect(connection.backend.fetches.map(\.target) == ["/screens/home"])
            #expect(connection.unreadOutput.isEmpty)

            try connection.backend.answerFetch(
                headers: Self.componentHeaders(etag: "\"home-1\""),
                body: Self.component("home")
            )
            let miss = try #require(try connection.readResponse())
            #expect(miss.status == .ok)
            #expect(miss.raw.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(miss.raw.hasSuffix(Self.missLines + "\r\n" + Self.component("home")))
            #expect(miss.headers["content-length"] == ["\(Self.component("home").utf8.count)"])
            #expect(!miss.closesConnection)
            #expect(connection.isOpen)

            try connection.send(Self.get("/screens/home"))
            let hit = try #require(try connection.readResponse())
            #expect(hit.status == .ok)
            #expect(hit.raw.hasSuffix(Self.hitLines + "\r\n" + Self.component("home")))
            #expect(!hit.closesConnection)
            #expect(connection.backend.fetches.count == 1)
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("ages run on the loop's clock: an answer 4 s in coming is 4 s old, and 10 s later 14 s old")
    func agesFollowTheLoopsClock() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/home"))
            connection.advanceClock(to: connection.start + .seconds(4))
            try connection.backend.answerFetch(
                headers: Self.componentHeaders(etag: "\"home-1\""),
                body: Self.component("home")
            )
            let miss = try #require(try connection.readResponse())
            // RFC 9111 section 4.2.3: the time the response took to arrive counts towards its age.
            #expect(miss.headers["cache-status"] == ["sdui-proxy; fwd=uri-miss; fwd-status=200; ttl=296; stored"])

            connection.advanceClock(to: connection.start + .seconds(14))
            try connection.send(Self.get("/screens/home"))
            let hit = try #require(try connection.readResponse())
            #expect(hit.headers["age"] == ["14"])
            #expect(hit.headers["cache-status"] == ["sdui-proxy; hit; ttl=286"])
        }
    }

    @Test("pipelined: nothing for the second is written before the first's answer, and reading pauses meanwhile")
    func pipeliningKeepsOrderAndPausesReading() throws {
        try EmbeddedPublicConnection.run { connection in
            // The second request could be answered from memory at once; only the order holds it back.
            try Self.fill("/screens/b", text: "b", on: connection)
            connection.channel.read()
            #expect(connection.outbound.reads == 1, "an idle connection lets reads through")

            try connection.send(Self.get("/screens/a") + Self.get("/screens/b"))
            #expect(connection.backend.fetches.map(\.target) == ["/screens/b", "/screens/a"])
            connection.runLoop()
            #expect(connection.unreadOutput.isEmpty)
            connection.channel.read()
            #expect(connection.outbound.reads == 1, "a read is held back while a pipelined request waits")

            try connection.backend.answerFetch(
                headers: Self.componentHeaders(etag: "\"a-1\""),
                body: Self.component("a")
            )
            connection.runLoop()
            let first = try #require(try connection.readResponse())
            #expect(first.raw.hasSuffix(Self.missLines + "\r\n" + Self.component("a")))
            let second = try #require(try connection.readResponse())
            #expect(second.raw.hasSuffix(Self.hitLines + "\r\n" + Self.component("b")))
            #expect(!first.closesConnection && !second.closesConnection)
            #expect(connection.outbound.reads == 2, "the held read goes through once the pipelined request is handled")
            #expect(connection.backend.fetches.count == 2)
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    /// The backend answers the miss for `/screens/a` in flight; that answer is the connection's last: it says
    /// `Connection: close`, the connection closes, and nothing follows it.
    static func expectLastAnswerToAMiss(on connection: EmbeddedPublicConnection) throws {
        try connection.backend.answerFetch(headers: Self.componentHeaders(etag: "\"a-1\""), body: Self.component("a"))
        connection.runLoop()
        let response = try #require(try connection.readResponse())
        #expect(response.raw.hasSuffix(Self.missLines + "Connection: close\r\n\r\n" + Self.component("a")))
        #expect(!connection.isOpen)
        #expect(connection.unreadOutput.isEmpty)
    }

    @Test("Connection: close on a request: its answer says so, the connection closes, what follows is not answered")
    func connectionCloseOnTheRequest() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/a", "Connection: close\r\n") + Self.get("/screens/b"))
            try Self.expectLastAnswerToAMiss(on: connection)
            #expect(connection.backend.fetches.map(\.target) == ["/screens/a"])
        }
    }

    @Test("Connection: close on a request answered from memory within the read: nothing behind it is answered")
    func connectionCloseOnAHit() throws {
        try EmbeddedPublicConnection.run { connection in
            try Self.fill("/screens/a", text: "a", on: connection)
            try connection.send(Self.get("/screens/a", "Connection: close\r\n") + Self.get("/screens/a"))
            connection.runLoop()
            let response = try #require(try connection.readResponse())
            #expect(response.raw.hasSuffix(Self.hitLines + "Connection: close\r\n\r\n" + Self.component("a")))
            #expect(!connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    // MARK: Deadlines

    @Test("a head that stops half-way gets 408 and a close at limits.requestTimeout, not before")
    func requestTimeoutAnswers408() throws {
        let requestTimeout = TimeAmount.milliseconds(100)
        try EmbeddedPublicConnection.run({ $0.limits.requestTimeout = .milliseconds(100) }) { connection in
            try connection.send("GET /screens/a HTTP/1.1\r\nHost: app.exa")
            connection.advanceClock(to: connection.start + requestTimeout - .milliseconds(1))
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)

            #expect(connection.advanceClock(until: { !connection.isOpen }))
            let response = try #require(try connection.readResponse())
            #expect(response.status == .requestTimeout)
            #expect(response.closesConnection)
            #expect(
                response.body
                    == #"{"error":{"kind":"requestTimeout","message":"the request was not complete within "#
                    + #"limits.requestTimeout","retryable":true}}"#
            )
            #expect(connection.unreadOutput.isEmpty)
            #expect(connection.backend.fetches.isEmpty)
        }
    }

    /// A route under `/api/` that streams uploads as they arrive (`stream: true`), for the tests of streamed bodies.
    static func streamingUploads(_ configuration: inout ProxyConfiguration) {
        var policy = configuration.cache.policy
        policy.bypass = true
        policy.stream = true
        configuration.cache.routes.append(.init(prefix: "/api/", policy: policy))
    }

    @Test("a forwarded body that stops half-way: the client gets 408 and a close, and the backend never hears of it")
    func stalledBufferedBodyTimesOut() throws {
        try EmbeddedPublicConnection.run({ $0.limits.requestTimeout = .milliseconds(100) }) { connection in
            try connection.send("PUT /api/profile HTTP/1.1\r\nHost: app.example\r\nContent-Length: 10\r\n\r\n0123")
            #expect(connection.backend.forwards.isEmpty)

            #expect(connection.advanceClock(until: { !connection.isOpen }))
            let response = try #require(try connection.readResponse())
            #expect(response.status == .requestTimeout)
            #expect(response.closesConnection)
            #expect(connection.backend.forwards.isEmpty, "no backend connection for a body that never came")
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("a streamed body that stops half-way fails the forward, and the client gets 408 and a close")
    func stalledForwardedBodyTimesOut() throws {
        try EmbeddedPublicConnection.run({
            $0.limits.requestTimeout = .milliseconds(100)
            Self.streamingUploads(&$0)
        }) { connection in
            try connection.send("PUT /api/profile HTTP/1.1\r\nHost: app.example\r\nContent-Length: 10\r\n\r\n0123")
            let forward = try #require(connection.backend.forwards.first)
            #expect(forward.receivedBody == "0123")

            #expect(connection.advanceClock(until: { !connection.isOpen }))
            let response = try #require(try connection.readResponse())
            #expect(response.status == .requestTimeout)
            #expect(response.closesConnection)
            #expect(response.body.hasPrefix(#"{"error":{"kind":"requestTimeout","#))
            #expect(!forward.bodyEnded, "the backend never sees the cut body as a whole one")
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("a connection that never sends is closed at limits.idleTimeout, not before, and without a 408")
    func idleConnectionIsClosed() throws {
        let idleTimeout = TimeAmount.milliseconds(100)
        try EmbeddedPublicConnection.run({ $0.limits.idleTimeout = .milliseconds(100) }) { connection in
            connection.advanceClock(to: connection.start + idleTimeout - .milliseconds(1))
            #expect(connection.isOpen)

            #expect(connection.advanceClock(until: { !connection.isOpen }))
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("after an answer, the kept-alive connection is closed at limits.idleTimeout, without a 408")
    func idleAfterAnAnswerIsClosed() throws {
        try EmbeddedPublicConnection.run({ $0.limits.idleTimeout = .milliseconds(100) }) { connection in
            try Self.fill("/screens/a", text: "a", on: connection)
            #expect(connection.isOpen)
            #expect(connection.advanceClock(until: { !connection.isOpen }))
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    /// Limits under which an idle close and a request timeout cannot be mistaken for each other.
    private static func shortRequestTimeout(_ configuration: inout ProxyConfiguration) {
        configuration.limits.requestTimeout = .milliseconds(100)
        configuration.limits.idleTimeout = .seconds(2)
    }

    @Test("a head that stops half-way behind a miss being answered gets 408 once that answer is out, not an idle close")
    func partialHeadBehindAMissTimesOut() throws {
        try EmbeddedPublicConnection.run(Self.shortRequestTimeout) { connection in
            try connection.send(Self.get("/screens/a") + "GET /screens/b HTTP/1.1\r\nHost: app.exa")
            try connection.backend.answerFetch(
                headers: Self.componentHeaders(etag: "\"a-1\""),
                body: Self.component("a")
            )
            let first = try #require(try connection.readResponse())
            #expect(first.status == .ok)
            #expect(!first.closesConnection)

            try Self.expectTimedOutRequest(on: connection)
        }
    }

    /// The connection is closed at the request deadline with a 408: bytes of a request had arrived, so it is not
    /// closed as an idle connection.
    static func expectTimedOutRequest(on connection: EmbeddedPublicConnection) throws {
        #expect(connection.advanceClock(until: { !connection.isOpen }))
        let timedOut = try #require(
            try connection.readResponse(),
            "bytes of a request had arrived: it is answered 408, not closed as an idle connection"
        )
        #expect(timedOut.status == .requestTimeout)
        #expect(timedOut.closesConnection)
    }

    @Test("a head that stops half-way behind a hit in the same read gets 408, not an idle close")
    func partialHeadBehindAHitTimesOut() throws {
        try EmbeddedPublicConnection.run(Self.shortRequestTimeout) { connection in
            try Self.fill("/screens/a", text: "a", on: connection)
            try connection.send(Self.get("/screens/a") + "GET /screens/b HTTP/1.1\r\nHost: app.exa")
            let hit = try #require(try connection.readResponse())
            #expect(hit.headers["x-cache"] == ["HIT"])

            try Self.expectTimedOutRequest(on: connection)
        }
    }

    // MARK: Malformed input

    @Test("malformed bytes get 400 and a close")
    func malformedBytesGet400() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send("GET /screens/a HTTP/1.1\r\nHost app.example\r\n\r\n")
            let response = try #require(try connection.readResponse())
            #expect(response.status == .badRequest)
            #expect(response.closesConnection)
            #expect(response.body.hasPrefix(#"{"error":{"kind":"badRequest","message":"malformed HTTP request: "#))
            #expect(!connection.isOpen)
            #expect(connection.backend.fetches.isEmpty)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("malformed bytes behind a request being answered: that answer goes out with Connection: close, no 400")
    func malformedBytesBehindARequest() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/a") + "GET /screens/b HTTP/1.1\r\nHost app.example\r\n\r\n")
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)

            try Self.expectLastAnswerToAMiss(on: connection)
            #expect(connection.backend.fetches.count == 1)
        }
    }

    // MARK: Drains

    @Test("a drain closes an idle connection at once, with nothing written")
    func quiesceClosesAnIdleConnection() throws {
        try EmbeddedPublicConnection.run { connection in
            try Self.fill("/screens/a", text: "a", on: connection)
            connection.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
            #expect(!connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("a drain lets a busy connection answer its request with Connection: close, then closes it")
    func quiesceLetsABusyConnectionAnswer() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(Self.get("/screens/a"))
            connection.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)

            try connection.backend.answerFetch(
                headers: Self.componentHeaders(etag: "\"a-1\""),
                body: Self.component("a")
            )
            let response = try #require(try connection.readResponse())
            #expect(response.raw.hasSuffix(Self.missLines + "Connection: close\r\n\r\n" + Self.component("a")))
            #expect(!connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    // MARK: Forwards

    @Test("a POST's body is read whole, then forwarded with its length; the answer comes back, kept alive")
    func forwardedPostIsReadWhole() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send(
                "POST /api/orders HTTP/1.1\r\nHost: app.example\r\nContent-Type: application/json\r\n"
                    + "Transfer-Encoding: chunked\r\n\r\n8\r\n{\"item\":\r\n"
            )
            #expect(connection.backend.forwards.isEmpty, "no backend exchange before the body is whole")
            try connection.send("c\r\n\"tea\",\"n\":2}\r\n0\r\n\r\n")
            let forward = try #require(connection.backend.forwards.first)
            #expect(forward.request.method == .POST)
            #expect(forward.body == nil, "nothing left to stream")
            #expect(forward.request.body.map { String(buffer: $0) } == "{\"item\":\"tea\",\"n\":2}")
            forward.respond(status: .created, headers: ["Content-Length": "8"], body: "{\"id\":7}")
            let response = try #require(try connection.readResponse())
            #expect(response.status == .created)
            #expect(response.body == "{\"id\":7}")
            #expect(!response.closesConnection)
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    /// Sends a whole POST of `{}` on a streaming route: the backend's exchange for it, waiting for its answer.
    private static func forwardSmallPost(on connection: EmbeddedPublicConnection) throws -> ScriptedForward {
        try connection.send(
            "POST /api/orders HTTP/1.1\r\nHost: app.example\r\nContent-Type: application/json\r\n"
                + "Content-Length: 2\r\n\r\n{}"
        )
        return try #require(connection.backend.forwards.first)
    }

    @Test(
        "a forwarded answer's head goes out with its first part: one write and flush for a small body with a length",
        arguments: [
            (["Content-Length": "8"], "{\"id\":7}", 1, 1),
            (["Content-Length": "9000"], String(repeating: "a", count: 9000), 2, 1),
            (["Transfer-Encoding": "chunked"], "{\"id\":7}", 5, 2),
            (["Content-Length": "0"], "", 1, 1),
        ] as [(HTTPHeaders, String, Int, Int)]
    )
    func forwardedAnswerWrites(headers: HTTPHeaders, body: String, writes: Int, flushes: Int) throws {
        try EmbeddedPublicConnection.run(Self.streamingUploads) { connection in
            let forward = try Self.forwardSmallPost(on: connection)
            let (writesBefore, flushesBefore) = (connection.outbound.writes, connection.outbound.flushes)
            forward.respond(status: .created, headers: headers, body: body)
            // A small part is copied behind the head; a chunked body's head, size line, part, CRLF and last chunk
            // are written apart, flushed with the part and at the end.
            #expect(connection.outbound.writes - writesBefore == writes)
            #expect(connection.outbound.flushes - flushesBefore == flushes)
            let response = try #require(try connection.readResponse())
            #expect(response.status == .created)
            #expect(response.body == body)
            #expect(!response.closesConnection)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("a forwarded answer's head waits in the handler for its body, and goes out with it; HEAD's at the end")
    func forwardedHeadHeldForBody() throws {
        try EmbeddedPublicConnection.run(Self.streamingUploads) { connection in
            let forward = try Self.forwardSmallPost(on: connection)
            let writesBefore = connection.outbound.writes
            forward.sink.receiveHead(status: .ok, fields: HTTPFieldLines(["Content-Length": "4"]), bodyLength: 4)
            #expect(connection.outbound.writes == writesBefore, "the head is held for the first part")
            #expect(connection.unreadOutput.isEmpty)
            _ = forward.sink.receiveBodyPart(ByteBuffer(string: "{}{}"))
            #expect(connection.outbound.writes == writesBefore + 1)
            forward.sink.receiveEnd()
            let response = try #require(try connection.readResponse())
            #expect(response.status == .ok)
            #expect(response.body == "{}{}")

            try connection.send("HEAD /api/orders HTTP/1.1\r\nHost: app.example\r\n\r\n")
            let head = try #require(connection.backend.forwards.last)
            head.respond(status: .ok, headers: ["Content-Length": "4"], body: "")
            let headResponse = try #require(try connection.readResponse(isHEAD: true))
            #expect(headResponse.status == .ok)
            #expect(headResponse.headers["content-length"] == ["4"])
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("a POST's body on a streaming route goes to the backend as it arrives; the answer comes back, kept alive")
    func forwardedPostStreamsItsBody() throws {
        try EmbeddedPublicConnection.run(Self.streamingUploads) { connection in
            try connection.send(
                "POST /api/orders HTTP/1.1\r\nHost: app.example\r\nContent-Type: application/json\r\n"
                    + "Content-Length: 20\r\n\r\n{\"item\":"
            )
            let forward = try #require(connection.backend.forwards.first)
            #expect(forward.request.method == .POST)
            #expect(forward.request.target == "/api/orders")
            #expect(forward.receivedBody == "{\"item\":")
            #expect(!forward.bodyEnded)

            try connection.send("\"tea\",\"n\":2}")
            #expect(forward.receivedBody == "{\"item\":\"tea\",\"n\":2}")
            #expect(forward.bodyEnded)
            #expect(connection.unreadOutput.isEmpty)

            forward.respond(status: .created, headers: ["Content-Length": "8"], body: "{\"id\":7}")
            let response = try #require(try connection.readResponse())
            #expect(response.status == .created)
            #expect(response.body == "{\"id\":7}")
            #expect(response.headers["x-cache"].isEmpty)
            #expect(!response.closesConnection)
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
            #expect(connection.backend.fetches.isEmpty)
        }
    }

    @Test("a body answered before it was whole does not count against the next request's limits.maxBodyBytes")
    func earlyAnswerLeavesNoBodyCount() throws {
        try EmbeddedPublicConnection.run({
            $0.limits.maxBodyBytes = 16
            Self.streamingUploads(&$0)
        }) { connection in
            try connection.send("POST /api/a HTTP/1.1\r\nHost: app.example\r\nContent-Length: 16\r\n\r\n123456789012")
            let early = try #require(connection.backend.forwards.first)
            early.respond(status: .accepted, headers: ["Content-Length": "0"], body: "")
            #expect(try #require(try connection.readResponse()).status == .accepted)
            // The rest of the first body is read and dropped; the next request is within the limit on its own.
            try connection.send("3456")
            try connection.send("POST /api/b HTTP/1.1\r\nHost: app.example\r\nContent-Length: 10\r\n\r\n1234567890")
            let second = try #require(connection.backend.forwards.last)
            #expect(second.request.target == "/api/b")
            #expect(second.receivedBody == "1234567890")
            second.respond(status: .created, headers: ["Content-Length": "0"], body: "")
            let response = try #require(try connection.readResponse())
            #expect(response.status == .created)
            #expect(connection.isOpen)
        }
    }

    @Test("a backend that answers without reading the body: reading, paused for it, resumes to drop the rest")
    func earlyAnswerResumesPausedReading() throws {
        try EmbeddedPublicConnection.run(Self.streamingUploads) { connection in
            connection.backend.readsForwardedBodies = false
            let chunk = String(repeating: "x", count: 64 * 1024)
            try connection.send("POST /api/upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1048576\r\n\r\n")
            for _ in 0..<5 { try connection.send(chunk) }
            // Over the stream's high watermark, with nobody taking it: reads are held back.
            let readsWhilePaused = connection.outbound.reads
            connection.channel.read()
            #expect(connection.outbound.reads == readsWhilePaused, "reading pauses while the backend takes nothing")

            let forward = try #require(connection.backend.forwards.first)
            forward.respond(status: .unauthorized, headers: ["Content-Length": "0"], body: "")
            #expect(try #require(try connection.readResponse()).status == .unauthorized)
            #expect(
                connection.outbound.reads > readsWhilePaused,
                "the held-back read goes through once the answer is out"
            )
            // The rest of the body is read and dropped, and the connection takes its next request.
            for _ in 0..<11 { try connection.send(chunk) }
            try connection.send("GET /screens/next HTTP/1.1\r\nHost: app.example\r\n\r\n")
            #expect(connection.backend.forwards.count == 1)
            #expect(connection.backend.fetches.count == 1)
            #expect(connection.isOpen)
        }
    }

    @Test("a drain closes a connection whose answer is out while the rest of its body still comes")
    func drainAfterEarlyAnswer() throws {
        try EmbeddedPublicConnection.run(Self.streamingUploads) { connection in
            try connection.send("POST /api/a HTTP/1.1\r\nHost: app.example\r\nContent-Length: 100\r\n\r\nabc")
            let forward = try #require(connection.backend.forwards.first)
            forward.respond(status: .accepted, headers: ["Content-Length": "0"], body: "")
            #expect(try #require(try connection.readResponse()).status == .accepted)
            #expect(connection.isOpen)
            connection.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
            connection.runLoop()
            #expect(!connection.isOpen)
        }
    }

    @Test("malformed bytes after a HEAD on a kept-alive connection get a 400 with its body")
    func malformedAfterHead() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send("HEAD /screens/home HTTP/1.1\r\nHost: app.example\r\n\r\n")
            try connection.backend.answerFetch(headers: ["Content-Type": "text/plain"], body: "0123456789")
            connection.runLoop()
            #expect(try #require(try connection.readResponse(isHEAD: true)).status == .ok)
            try connection.send("NOT HTTP AT ALL\r\n\r\n")
            let refusal = try #require(try connection.readResponse())
            #expect(refusal.status == .badRequest)
            #expect(refusal.body.hasPrefix(#"{"error":"#))
        }
    }

    @Test("a miss whose client left before the answer is still counted")
    func missCountedAfterTheClientLeft() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send("GET /screens/left HTTP/1.1\r\nHost: app.example\r\n\r\n")
            #expect(connection.backend.fetches.count == 1)
            try connection.channel.close().wait()
            connection.runLoop()
            // The handler is gone from the closed connection's pipeline before the answer comes.
            #expect(throws: (any Error).self) {
                try connection.channel.pipeline.syncOperations.handler(type: PublicHTTPHandler.self)
            }
            #expect(connection.countedResponses == 0)
            try connection.backend.answerFetch(headers: ["Content-Type": "text/plain"], body: "late")
            connection.runLoop()
            #expect(connection.countedResponses == 1)
        }
    }

    @Test("a whole upload the backend has not taken yet does not hold reading for the requests after it")
    func wholeUploadDoesNotHoldReading() throws {
        try EmbeddedPublicConnection.run(Self.streamingUploads) { connection in
            connection.backend.readsForwardedBodies = false
            let chunk = String(repeating: "x", count: 64 * 1024)
            try connection.send("POST /api/upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: 327680\r\n\r\n")
            for _ in 0..<5 { try connection.send(chunk) }
            let forward = try #require(connection.backend.forwards.first)
            forward.respond(status: .created, headers: ["Content-Length": "0"], body: "")
            #expect(try #require(try connection.readResponse()).status == .created)
            // The stream still holds what the backend never took; the connection reads on regardless.
            let before = connection.outbound.reads
            connection.channel.read()
            #expect(connection.outbound.reads == before + 1)
            try connection.send("GET /screens/next HTTP/1.1\r\nHost: app.example\r\n\r\n")
            #expect(connection.backend.fetches.count == 1)
        }
    }

    @Test("a forwarded answer whose client left is counted with the backend's status")
    func forwardCountedAfterTheClientLeft() throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send("DELETE /api/orders/1 HTTP/1.1\r\nHost: app.example\r\n\r\n")
            let forward = try #require(connection.backend.forwards.first)
            try connection.channel.close().wait()
            connection.runLoop()
            forward.respond(status: .notFound, headers: ["Content-Length": "0"], body: "")
            connection.runLoop()
            #expect(connection.countedResponses(statusClass: "4xx") == 1)
            #expect(connection.countedResponses == 1)
        }
    }

    @Test("a declared body over limits.maxBodyBytes gets 413 and a close, and is not forwarded")
    func declaredBodyOverTheLimit() throws {
        try EmbeddedPublicConnection.run({ $0.limits.maxBodyBytes = 16 }) { connection in
            try connection.send(
                "POST /api/orders HTTP/1.1\r\nHost: app.example\r\nContent-Length: 17\r\n\r\n12345678901234567"
            )
            let response = try #require(try connection.readResponse())
            #expect(response.status == .payloadTooLarge)
            #expect(response.closesConnection)
            #expect(response.body.hasPrefix(#"{"error":{"kind":"tooLarge","#))
            #expect(!connection.isOpen)
            #expect(connection.backend.forwards.isEmpty)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test("a chunked body that grows past limits.maxBodyBytes gets 413 and a close; the rest is not forwarded")
    func streamedBodyOverTheLimit() throws {
        try EmbeddedPublicConnection.run({
            $0.limits.maxBodyBytes = 16
            Self.streamingUploads(&$0)
        }) { connection in
            try connection.send(
                "POST /api/orders HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"
            )
            let forward = try #require(connection.backend.forwards.first)
            #expect(forward.receivedBody == "0123456789")
            #expect(connection.unreadOutput.isEmpty)

            try connection.send("a\r\nabcdefghij\r\n0\r\n\r\n")
            let response = try #require(try connection.readResponse())
            #expect(response.status == .payloadTooLarge)
            #expect(response.closesConnection)
            #expect(
                response.body
                    == #"{"error":{"kind":"tooLarge","message":"the request body exceeds limits.maxBodyBytes","#
                    + #""retryable":false}}"#
            )
            #expect(!connection.isOpen)
            #expect(forward.receivedBody == "0123456789")
            #expect(!forward.bodyEnded)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    @Test(
        "a forward that fails before the backend answers gets the JSON error",
        arguments: [
            (
                ProxyError(.timeout, "the backend did not answer in time") as any Error,
                HTTPResponseStatus.gatewayTimeout,
                #"{"error":{"kind":"timeout","message":"the backend did not answer in time","retryable":true}}"#
            ),
            (
                ProxyError(.network, "the backend could not be reached"), .badGateway,
                #"{"error":{"kind":"network","message":"the backend could not be reached","retryable":true}}"#
            ),
            (
                ChannelError.ioOnClosedChannel, .badGateway,
                #"{"error":{"kind":"network","message":"the backend exchange failed","retryable":true}}"#
            ),
        ]
    )
    func failedForward(error: any Error, status: HTTPResponseStatus, body: String) throws {
        try EmbeddedPublicConnection.run { connection in
            try connection.send("DELETE /api/orders/7 HTTP/1.1\r\nHost: app.example\r\n\r\n")
            let forward = try #require(connection.backend.forwards.first)
            #expect(forward.request.method == .DELETE)
            forward.fail(with: error)
            let response = try #require(try connection.readResponse())
            #expect(response.status == status)
            #expect(response.body == body)
            #expect(response.headers["content-type"] == ["application/json"])
            #expect(response.headers["cache-control"] == ["no-store"])
            #expect(!response.closesConnection)
            #expect(connection.isOpen)
            #expect(connection.unreadOutput.isEmpty)
        }
    }

    // MARK: HEAD and conditional requests

    @Test("HEAD on a hit writes the head, with the body's length, and no body")
    func headOnAHit() throws {
        try EmbeddedPublicConnection.run { connection in
            let get = try Self.fill("/screens/a", text: "a", on: connection)
            try connection.send("HEAD /screens/a HTTP/1.1\r\nHost: app.example\r\n\r\n")
            let head = try #require(try connection.readResponse(isHEAD: true))
            #expect(head.status == .ok)
            #expect(head.headers["x-cache"] == ["HIT"])
            #expect(head.headers["content-length"] == get.headers["content-length"])
            #expect(head.headers["etag"] == ["\"a-1\""])
            #expect(head.raw.hasSuffix(Self.hitLines + "\r\n"))
            #expect(connection.unreadOutput.isEmpty, "no body follows the head")
            #expect(connection.isOpen)
            #expect(connection.backend.fetches.count == 1)
        }
    }

    @Test("a conditional GET whose If-None-Match matches the entry's ETag gets 304 without a body")
    func conditionalGetGets304() throws {
        try EmbeddedPublicConnection.run { connection in
            try Self.fill("/screens/a", text: "a", on: connection)
            try connection.send(Self.get("/screens/a", "If-None-Match: \"a-1\"\r\n"))
            let notModified = try #require(try connection.readResponse())
            #expect(notModified.status == .notModified)
            #expect(notModified.raw.hasPrefix("HTTP/1.1 304 Not Modified\r\n"))
            #expect(notModified.raw.hasSuffix("\r\n\r\n"))
            #expect(notModified.headers["etag"] == ["\"a-1\""])
            #expect(notModified.headers["x-cache"] == ["HIT"])
            #expect(notModified.body.isEmpty)
            #expect(connection.unreadOutput.isEmpty)

            try connection.send(Self.get("/screens/a", "If-None-Match: \"a-0\"\r\n"))
            let full = try #require(try connection.readResponse())
            #expect(full.status == .ok)
            #expect(full.body == Self.component("a"))
            #expect(connection.isOpen)
        }
    }
}
