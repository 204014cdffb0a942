import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// One HTTP/2 stream of an ``HTTP2Connection`` on an `EmbeddedChannel`, the frames `NIOHTTP2Handler` would hand it
/// written in directly: what is the stream's own (its deadline, its window, a reset before it is answered), the rest
/// being the exchange's, which the HTTP/1.1 tests cover. Time is the embedded loop's.
@Suite("An HTTP/2 stream")
struct HTTP2StreamTests {
    /// Stream 1 of a connection on an embedded channel, its backend scripted.
    final class Stream {
        let id: HTTP2StreamID = 1
        let loop = EmbeddedEventLoop()
        let channel: EmbeddedChannel
        let backend: ScriptedNetworkClient
        let context: ProxyContext
        let tally = RequestTally()
        /// The window the stream gave back so far, and how it was reset, if it was.
        private(set) var givenBack = 0
        private(set) var resets: [HTTP2ErrorCode] = []

        convenience init(_ configure: (inout ProxyConfiguration) -> Void = { _ in }) throws {
            var configuration = ProxyConfiguration()
            configuration.upstream.url = "http://backend.invalid"
            configure(&configuration)
            let backend = ScriptedNetworkClient()
            try self.init(
                context: EmbeddedPublicConnection.makeContext(configuration, backend: backend),
                backend: backend
            )
        }

        /// A stream of another connection to the same proxy: its cache, its backend.
        static func reusing(_ other: Stream) throws -> Stream {
            try Stream(context: other.context, backend: other.backend)
        }

        private init(context: ProxyContext, backend: ScriptedNetworkClient) throws {
            self.context = context
            self.backend = backend
            loop.advanceTime(to: .now())
            channel = EmbeddedChannel(loop: loop)
            let connection = HTTP2Connection(
                runtime: ProxyRuntime(context),
                eventLoop: loop,
                requests: tally,
                isSecure: true,
                drainGrace: .seconds(30)
            )
            try channel.pipeline.syncOperations.addHandler(connection)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40_000)).wait()
        }

        /// A request's HEADERS frame.
        static func headers(
            _ method: HTTPMethod,
            _ path: String,
            _ fields: [(String, String)] = [],
            endStream: Bool
        ) -> HTTP2Frame.FramePayload {
            let block = HPACKHeaders(
                [(":method", method.rawValue), (":scheme", "https"), (":path", path), (":authority", "app.example")]
                    + fields
            )
            return .headers(.init(headers: block, endStream: endStream))
        }

        static func data(_ bytes: ByteBuffer, endStream: Bool = false) -> HTTP2Frame.FramePayload {
            .data(.init(data: .byteBuffer(bytes), endStream: endStream))
        }

        func send(_ payloads: HTTP2Frame.FramePayload...) throws {
            for payload in payloads { try channel.writeInbound(HTTP2Frame(streamID: id, payload: payload)) }
        }

        /// The client resets the stream: the connection handler reports it closed.
        func resetByClient() {
            channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: id, reason: .cancel))
        }

        /// The stream's HEADERS and DATA written so far; its WINDOW_UPDATEs are added to ``givenBack`` and its
        /// resets to ``resets``.
        func written() throws -> [HTTP2Frame.FramePayload] {
            var payloads: [HTTP2Frame.FramePayload] = []
            while let frame = try channel.readOutbound(as: HTTP2Frame.self) {
                guard frame.streamID == id else { continue }
                switch frame.payload {
                case .windowUpdate(let increment): givenBack += increment
                case .rstStream(let code): resets.append(code)
                default: payloads.append(frame.payload)
                }
            }
            return payloads
        }

        func finish() {
            _ = try? channel.finish(acceptAlreadyClosed: true)
        }
    }

    private static func status(of payloads: [HTTP2Frame.FramePayload]) -> HTTPResponseStatus? {
        for case .headers(let headers) in payloads {
            return headers.headers.first(name: ":status").flatMap(Int.init).map { HTTPResponseStatus(statusCode: $0) }
        }
        return nil
    }

    private static func body(of payloads: [HTTP2Frame.FramePayload]) -> String {
        payloads.compactMap { payload -> String? in
            if case .data(let data) = payload, case .byteBuffer(let buffer) = data.data {
                return String(buffer: buffer)
            }
            return nil
        }.joined()
    }

    /// Whether the last payload ends the stream.
    private static func endsStream(_ payloads: [HTTP2Frame.FramePayload]) -> Bool {
        switch payloads.last {
        case .headers(let headers)?: headers.endStream
        case .data(let data)?: data.endStream
        default: false
        }
    }

    @Test("a GET is answered on the stream once the loop turns: head, body, end; the backend hears HTTP/2 over TLS")
    func answered() throws {
        let stream = try Stream()
        defer { stream.finish() }
        try stream.send(Stream.headers(.GET, "/screens/a", endStream: true))
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
        #expect(Self.endsStream(parts), "the response ends the stream: \(parts)")
        guard case .headers(let head) = parts.first else {
            Issue.record("a HEADERS frame first: \(parts)")
            return
        }
        #expect(head.headers.first(name: "x-cache") == "MISS")
        #expect(head.headers.allSatisfy { $0.name == $0.name.lowercased() }, "HTTP/2 names are lower case")
        let slot = RequestTally.slot(method: .GET, statusCode: 200, cacheResult: .miss, protocol: .http2)
        #expect(stream.tally.count(inSlot: slot) == 1, "counted as an HTTP/2 response")
        #expect(stream.tally.streamsOpened == 1)
    }

    /// A stored component's answer to `method` on a second stream: `stream` fills the entry, and the stream that
    /// reuses its connection asks again. The second stream and what it wrote.
    private static func fromStore(
        after stream: Stream,
        method: HTTPMethod
    ) throws -> (Stream, [HTTP2Frame.FramePayload]) {
        try stream.send(Stream.headers(.GET, "/screens/a", endStream: true))
        stream.loop.run()
        try stream.backend.answerFetch(
            headers: ["Content-Type": "application/json", "Cache-Control": "max-age=60"],
            body: #"{"_beagleComponent_":"beagle:text"}"#
        )
        _ = try stream.written()
        let again = try Stream.reusing(stream)
        try again.send(Stream.headers(method, "/screens/a", endStream: true))
        again.loop.run()
        return (again, try again.written())
    }

    @Test("a HEAD is answered with the stored head alone, END_STREAM on it, its length the body's")
    func headRequest() throws {
        let stream = try Stream()
        defer { stream.finish() }
        let (again, parts) = try Self.fromStore(after: stream, method: .HEAD)
        #expect(parts.count == 1, "no DATA frame: \(parts)")
        guard case .headers(let head) = parts.first else {
            Issue.record("a HEADERS frame: \(parts)")
            return
        }
        #expect(head.endStream)
        #expect(head.headers.first(name: ":status") == "200")
        #expect(head.headers.first(name: "x-cache") == "HIT")
        #expect(head.headers.first(name: "content-length") == "35")
        again.finish()
    }

    @Test(
        "RFC 7541 §6.2, §7.1.3: fields that change per response are not indexed by HPACK, a cookie never; the rest are"
    )
    func headerIndexing() throws {
        let stream = try Stream()
        defer { stream.finish() }
        let (again, parts) = try Self.fromStore(after: stream, method: .GET)
        guard case .headers(let head) = parts.first else {
            Issue.record("a HEADERS frame first")
            return
        }
        var indexing: [String: HPACKIndexing] = [:]
        for (name, _, index) in head.headers { indexing[name] = index }
        #expect(indexing["x-cache"] == .indexable)
        #expect(indexing["age"] == .nonIndexable, "a hit's age changes every second")
        #expect(indexing["cache-status"] == .nonIndexable, "its ttl too")
        #expect(indexing["content-type"] == .indexable)
        #expect(indexing["cache-control"] == .indexable)
        again.finish()

        let composed = HTTP2Stream.block(
            status: .ok,
            ["Set-Cookie": "session=1", "Date": "Sun, 29 Nov 2026 15:00:00 GMT", "Content-Type": "text/plain"]
        )
        var composedIndexing: [String: HPACKIndexing] = [:]
        for (name, _, index) in composed { composedIndexing[name] = index }
        #expect(composedIndexing["set-cookie"] == .neverIndexed)
        #expect(composedIndexing["date"] == .nonIndexable)
        #expect(composedIndexing["content-type"] == .indexable)
    }

    @Test("a stored cookie (cache.storeSetCookie) is served never indexed, each one, after the stored fields")
    func storedCookies() throws {
        let stream = try Stream { $0.cache.storageRules.storesSetCookie = true }
        defer { stream.finish() }
        try stream.send(Stream.headers(.GET, "/screens/a", endStream: true))
        stream.loop.run()
        try stream.backend.answerFetch(
            headers: [
                "Content-Type": "application/json", "Set-Cookie": "a=1", "Cache-Control": "max-age=60",
                "Set-Cookie": "b=2",
            ],
            body: #"{"_beagleComponent_":"beagle:text"}"#
        )
        _ = try stream.written()
        let again = try Stream.reusing(stream)
        defer { again.finish() }
        try again.send(Stream.headers(.GET, "/screens/a", endStream: true))
        again.loop.run()
        guard case .headers(let head) = try again.written().first else {
            Issue.record("a HEADERS frame first")
            return
        }
        #expect(head.headers.first(name: "x-cache") == "HIT")
        let fields = head.headers.map { ($0.name, $0.value, $0.indexable) }
        #expect(fields.filter { $0.0 == "set-cookie" }.map(\.1) == ["a=1", "b=2"], "both, in order")
        #expect(fields.filter { $0.0 == "set-cookie" }.allSatisfy { $0.2 == .neverIndexed })
        #expect(fields.first?.0 == ":status")
        #expect(fields.first { $0.0 == "cache-control" }?.2 == .indexable)
    }

    @Test("a stream reset after its request arrived, before the loop turned, starts no fill (rapid reset)")
    func resetBeforeRouting() throws {
        let stream = try Stream()
        defer { stream.finish() }
        try stream.send(Stream.headers(.GET, "/screens/a", endStream: true))
        stream.resetByClient()
        stream.loop.run()
        #expect(stream.backend.fetches.isEmpty)
        #expect(try stream.written().isEmpty, "nothing answers a reset stream")
    }

    @Test("a request not whole within limits.requestTimeout is answered 408 at the deadline, not before")
    func requestTimeout() throws {
        let stream = try Stream { $0.limits.requestTimeout = .seconds(2) }
        defer { stream.finish() }
        let opened = stream.loop.now
        try stream.send(
            Stream.headers(.PUT, "/profile", [("content-length", "10")], endStream: false),
            Stream.data(ByteBuffer(string: "0123"))
        )
        stream.loop.advanceTime(to: opened + .seconds(2) - .milliseconds(1))
        #expect(try stream.written().isEmpty)
        stream.loop.advanceTime(to: opened + .seconds(2))
        let parts = try stream.written()
        #expect(Self.status(of: parts) == .requestTimeout)
        #expect(Self.body(of: parts).contains(#""kind":"requestTimeout""#))
        #expect(stream.backend.forwards.isEmpty, "the backend never heard of the half body")
        #expect(stream.resets == [.cancel], "the stream is reset after its 408")
        #expect(stream.channel.isActive, "the connection serves on")
        // DATA the client had on its way: the stream ended with its reset and gives no window back for it (behind a
        // RST_STREAM that NIOHTTP2Handler still holds, a WINDOW_UPDATE would name a stream closed when it goes out).
        try stream.send(Stream.data(ByteBuffer(repeating: 0x61, count: 40_000)))
        #expect(try stream.written().isEmpty)
        #expect(stream.givenBack == 0)
    }

    /// A stream whose PUT on a streaming route is forwarded with nobody reading its body yet, and 7 parts of 64 KiB
    /// sent: the fifth takes the body stream over its high watermark (256 KiB), and the two after it are held.
    private static func heldUpload() throws -> (Stream, ScriptedForward) {
        let stream = try Stream {
            var policy = $0.cache.policy
            policy.bypass = true
            policy.stream = true
            $0.cache.routes.append(.init(prefix: "/api/", policy: policy))
        }
        stream.backend.readsForwardedBodies = false
        try stream.send(Stream.headers(.PUT, "/api/upload", endStream: false))
        let forward = try #require(stream.backend.forwards.first)
        let chunk = ByteBuffer(repeating: 0x61, count: 64 * 1024)
        for _ in 0..<7 { try stream.send(Stream.data(chunk)) }
        return (stream, forward)
    }

    @Test("a streamed body's window is kept while its backend takes no more, and given back as it takes")
    func bodyBackpressure() throws {
        let (stream, forward) = try Self.heldUpload()
        defer { stream.finish() }
        _ = try stream.written()
        #expect(stream.givenBack == 5 * 64 * 1024, "the held parts give no window back: the client stops")
        forward.readBody()
        _ = try stream.written()
        #expect(stream.givenBack == 7 * 64 * 1024, "each part's window comes back as the backend takes it")
        #expect(forward.receivedBody.utf8.count == 7 * 64 * 1024, "in order, nothing lost")
        try stream.send(Stream.data(ByteBuffer(string: "end"), endStream: true))
        stream.loop.run()
        #expect(forward.bodyEnded)
    }

    @Test("END_STREAM behind held parts ends the body after them, not before")
    func endBehindHeldParts() throws {
        let (stream, forward) = try Self.heldUpload()
        defer { stream.finish() }
        // Trailers end the request: dropped, their END_STREAM kept behind the held parts.
        try stream.send(.headers(.init(headers: HPACKHeaders([("x-checksum", "abc")]), endStream: true)))
        stream.loop.run()
        #expect(!forward.bodyEnded)
        forward.readBody()
        stream.loop.run()
        #expect(forward.receivedBody.utf8.count == 7 * 64 * 1024, "in order, nothing lost")
        #expect(forward.bodyEnded)
        _ = try stream.written()
        #expect(stream.givenBack == 5 * 64 * 1024, "no window back once the client has sent all it will")
    }

    @Test("the connection's window is given back as it runs low, whatever stream its DATA was for")
    func connectionWindow() throws {
        let stream = try Stream()
        defer { stream.finish() }
        let report = { (left: Int) in
            stream.channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: left, outboundWindowSize: 65_535)
            )
        }
        var updates: [Int] = []
        let read = {
            while let frame = try stream.channel.readOutbound(as: HTTP2Frame.self) {
                if frame.streamID == .rootStream, case .windowUpdate(let increment) = frame.payload {
                    updates.append(increment)
                }
            }
        }
        report(40_000)
        try read()
        #expect(updates.isEmpty, "more than half left")
        // DATA for a stream that no longer exists counts too: NIOHTTP2Handler reports the window, not the frames.
        report(20_000)
        try read()
        #expect(updates == [45_535])
    }

    @Test("a stream error swift-nio-http2 raises on a frame the stream wrote resets that stream, however far it got")
    func streamErrorResets() throws {
        let stream = try Stream()
        defer { stream.finish() }
        try stream.send(Stream.headers(.GET, "/screens/a", endStream: true))
        stream.loop.run()
        try stream.backend.answerFetch(
            headers: ["Content-Type": "application/json", "Cache-Control": "max-age=60"],
            body: #"{"_beagleComponent_":"beagle:text"}"#
        )
        #expect(Self.endsStream(try stream.written()), "answered whole, END_STREAM sent")
        // As when an END_STREAM contradicts the content-length sent: NIOHTTP2Handler reports it and sends nothing.
        stream.channel.pipeline.fireErrorCaught(
            NIOHTTP2Errors.streamError(streamID: stream.id, baseError: NIOHTTP2Errors.contentLengthViolated())
        )
        _ = try stream.written()
        #expect(stream.resets == [.internalError], "the client is not left waiting on a stream that never ends")
        #expect(stream.channel.isActive, "the connection serves on")
    }
}
