import NIOCore
import NIOEmbedded
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// One HTTP/2 stream's handler on an `EmbeddedChannel`, the parts the HTTP/1 codec would hand it written in
/// directly: what is the stream's own (its deadline, its reads, a reset before it is answered), the rest being the
/// exchange's, which the HTTP/1.1 tests cover. Time is the embedded loop's.
@Suite("An HTTP/2 stream's handler")
struct HTTP2StreamHandlerTests {
    /// A stream on an embedded channel, its backend scripted.
    final class Stream {
        let loop = EmbeddedEventLoop()
        let channel: EmbeddedChannel
        let backend = ScriptedNetworkClient()
        let reads = ReadCounter()
        let tally = RequestTally()

        init(_ configure: (inout ProxyConfiguration) -> Void = { _ in }) throws {
            var configuration = ProxyConfiguration()
            configuration.upstream.url = "http://backend.invalid"
            configure(&configuration)
            loop.advanceTime(to: .now())
            channel = EmbeddedChannel(loop: loop)
            let context = EmbeddedPublicConnection.makeContext(configuration, backend: backend)
            let handler = HTTP2StreamHandler(
                runtime: ProxyRuntime(context),
                eventLoop: loop,
                requests: tally,
                isSecure: true
            )
            try channel.pipeline.syncOperations.addHandler(reads)
            try channel.pipeline.syncOperations.addHandler(handler)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40_000)).wait()
        }

        static func head(_ method: HTTPMethod, _ path: String, _ fields: [(String, String)] = []) -> HTTPRequestHead {
            HTTPRequestHead(
                version: HTTPVersion(major: 2, minor: 0),
                method: method,
                uri: path,
                headers: HTTPHeaders([("host", "app.example")] + fields)
            )
        }

        func send(_ parts: HTTPServerRequestPart...) throws {
            for part in parts { try channel.writeInbound(part) }
        }

        /// The parts written so far.
        func written() throws -> [HTTPServerResponsePart] {
            var parts: [HTTPServerResponsePart] = []
            while let part = try channel.readOutbound(as: HTTPServerResponsePart.self) { parts.append(part) }
            return parts
        }

        func finish() {
            _ = try? channel.finish(acceptAlreadyClosed: true)
        }
    }

    private static func status(of parts: [HTTPServerResponsePart]) -> HTTPResponseStatus? {
        for case .head(let head) in parts { return head.status }
        return nil
    }

    private static func body(of parts: [HTTPServerResponsePart]) -> String {
        parts.compactMap { part -> String? in
            if case .body(.byteBuffer(let buffer)) = part { return String(buffer: buffer) }
            return nil
        }.joined()
    }

    @Test("a GET is answered on the stream once the loop turns: head, body, end; the backend hears HTTP/2 over TLS")
    func answered() throws {
        let stream = try Stream()
        defer { stream.finish() }
        try stream.send(.head(Stream.head(.GET, "/screens/a")), .end(nil))
        #expect(stream.backend.fetches.isEmpty, "nothing before the loop turns")
        stream.loop.run()
        let fetch = try #require(stream.backend.fetches.first)
        #expect(fetch.headers.first(name: "via") == "2 sdui-proxy")
        #expect(fetch.headers.first(name: "x-forwarded-proto") == "https")
        try stream.backend.answerFetch(
            headers: ["Content-Type": "application/json", "Cache-Control": "max-age=60"],
            body: #"{"_beagleComponent_":"beagle:text"}"#
        )
        let parts = try stream.written()
        #expect(Self.status(of: parts) == .ok)
        #expect(Self.body(of: parts) == #"{"_beagleComponent_":"beagle:text"}"#)
        guard case .end = parts.last else {
            Issue.record("the response ends the stream: \(parts)")
            return
        }
        let slot = RequestTally.slot(method: .GET, statusCode: 200, cacheResult: .miss, protocol: .http2)
        #expect(stream.tally.count(inSlot: slot) == 1, "counted as an HTTP/2 response")
        #expect(stream.tally.streamsOpened == 1)
    }

    @Test("a stream reset after its request arrived, before the loop turned, starts no fill (rapid reset)")
    func resetBeforeRouting() throws {
        let stream = try Stream()
        defer { stream.finish() }
        try stream.send(.head(Stream.head(.GET, "/screens/a")), .end(nil))
        try stream.channel.close().wait()
        stream.loop.run()
        #expect(stream.backend.fetches.isEmpty)
    }

    @Test("a request not whole within limits.requestTimeout is answered 408 at the deadline, not before")
    func requestTimeout() throws {
        let stream = try Stream { $0.limits.requestTimeout = .seconds(2) }
        defer { stream.finish() }
        let opened = stream.loop.now
        try stream.send(.head(Stream.head(.PUT, "/profile", [("content-length", "10")])), .body(ByteBuffer(string: "0123")))
        stream.loop.advanceTime(to: opened + .seconds(2) - .milliseconds(1))
        #expect(try stream.written().isEmpty)
        stream.loop.advanceTime(to: opened + .seconds(2))
        let parts = try stream.written()
        #expect(Self.status(of: parts) == .requestTimeout)
        #expect(Self.body(of: parts).contains(#""kind":"requestTimeout""#))
        #expect(stream.backend.forwards.isEmpty, "the backend never heard of the half body")
    }

    @Test("reading is held back while a streamed body's backend takes no more, and resumes when it does")
    func bodyBackpressure() throws {
        let stream = try Stream {
            var policy = $0.cache.policy
            policy.bypass = true
            policy.stream = true
            $0.cache.routes.append(.init(prefix: "/api/", policy: policy))
        }
        defer { stream.finish() }
        stream.backend.readsForwardedBodies = false
        try stream.send(.head(Stream.head(.PUT, "/api/upload", [("transfer-encoding", "chunked")])))
        let forward = try #require(stream.backend.forwards.first)
        let chunk = ByteBuffer(repeating: 0x61, count: 64 * 1024)
        // Over the body stream's high watermark, with nobody taking it: reads are held back.
        for _ in 0..<5 { try stream.send(.body(chunk)) }
        let paused = stream.reads.count
        stream.channel.read()
        #expect(stream.reads.count == paused, "reading pauses while the backend takes nothing")
        forward.readBody()
        #expect(stream.reads.count == paused + 1, "the held-back read goes on once the backend takes more")
        #expect(forward.receivedBody.utf8.count == 5 * 64 * 1024)
    }
}
