import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// HTTP/2 clients that misbehave, played frame by frame over clear text (prior knowledge): each is cut off with
/// GOAWAY and costs the backend nothing, and a well-behaved client is served meanwhile. Also what an honest
/// client relies on: flow control, per-stream deadlines, GOAWAY on drain.
@Suite("HTTP/2 hardening on the public listener")
struct HTTP2HardeningTests {
    /// Reads frames from `connection` until one satisfies `condition` or the server closes.
    private static func frames(
        on connection: RawConnection,
        until condition: @escaping ([HTTP2Wire.Frame]) -> Bool
    ) async throws -> [HTTP2Wire.Frame] {
        let bytes = try await connection.received(until: { condition(HTTP2Wire.frames(in: $0)) })
        return HTTP2Wire.frames(in: bytes)
    }

    private static func goAway(in frames: [HTTP2Wire.Frame]) -> HTTP2Wire.Frame? {
        frames.first { $0.type == HTTP2Wire.FrameType.goAway.rawValue }
    }

    @Test(
        "CVE-2023-44487: a client that opens and resets streams in a tight loop gets GOAWAY, reaches no backend, slows no one"
    )
    func rapidReset() async throws {
        try await ProxyHarness.run { proxy in
            let attacker = try await RawConnection(port: proxy.server.publicPort)
            // Cache fills (GET) and forwards without a body (DELETE, answered at once over HTTP/1.1), each reset
            // in the same write as it was opened: 300 of them, past the 200 resets a connection may make.
            var burst = HTTP2Wire.connectionStart()
            for index in 0..<300 {
                let stream = UInt32(2 * index + 1)
                let method = index.isMultiple(of: 2) ? "GET" : "DELETE"
                var headers = HTTP2Wire.request(stream: stream, method: method, path: "/screens/reset-\(index)")
                var reset = HTTP2Wire.rstStream(stream)
                burst.writeBuffer(&headers)
                burst.writeBuffer(&reset)
            }
            try? await attacker.send(burst)
            let frames = try await Self.frames(on: attacker, until: { Self.goAway(in: $0) != nil })
            let goAway = try #require(Self.goAway(in: frames), "the connection is told to go away")
            #expect(goAway.errorCode == HTTP2Wire.enhanceYourCalm)
            _ = try await attacker.readUntilClosed()

            // Another client is served as ever, and the backend heard of none of the reset streams: the honest
            // request, answered after the attacker's connection closed, is the only one it saw.
            #expect(try await proxy.get("/screens/honest").status == .ok)
            #expect(proxy.origin.requests.map(\.uri) == ["/screens/honest"])
        }
    }

    @Test("a malformed stream is reset alone: the streams beside it are answered, and the connection serves on")
    func streamErrorStaysOnItsStream() async throws {
        try await ProxyHarness.run { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            var bytes = HTTP2Wire.connectionStart()
            var good = HTTP2Wire.request(stream: 1, path: "/screens/a")
            bytes.writeBuffer(&good)
            // Malformed in HTTP/2 (RFC 9113 sections 8.2 and 8.3), one per stream: an upper-case name, a value
            // with CR LF (a field smuggled into the HTTP/1.1 head to the backend), a connection-specific field,
            // `te` other than trailers, and a pseudo-header after a regular field.
            let malformed: [[(String, String)]] = [
                [("X-Bad", "1")],
                [("x-note", "a\r\nx-smuggled: 1")],
                [("connection", "close")],
                [("te", "gzip")],
                [("accept", "*/*"), (":protocol", "websocket")],
            ]
            let badStreams = malformed.indices.map { UInt32(3 + 2 * $0) }
            for (stream, fields) in zip(badStreams, malformed) {
                var bad = HTTP2Wire.request(stream: stream, path: "/screens/b\(stream)", fields: fields)
                bytes.writeBuffer(&bad)
            }
            try await client.send(bytes)
            let ended: ([HTTP2Wire.Frame], UInt32) -> Bool = { frames, stream in
                frames.contains { $0.stream == stream && $0.flags & HTTP2Wire.endStream != 0 }
            }
            let isReset: (HTTP2Wire.Frame, UInt32) -> Bool = { frame, stream in
                frame.type == HTTP2Wire.FrameType.rstStream.rawValue && frame.stream == stream
            }
            let frames = try await Self.frames(on: client) { frames in
                ended(frames, 1) && badStreams.allSatisfy { stream in frames.contains { isReset($0, stream) } }
            }
            #expect(Self.goAway(in: frames) == nil)
            for stream in badStreams {
                #expect(
                    frames.first { isReset($0, stream) }?.errorCode == HTTP2Wire.protocolError,
                    "stream \(stream) is reset as malformed"
                )
                #expect(!frames.contains { $0.stream == stream && $0.type == HTTP2Wire.FrameType.headers.rawValue })
            }
            let again = HTTP2Wire.request(stream: 13, path: "/screens/a")
            try await client.send(again)
            let later = try await Self.frames(on: client) { ended($0, 13) }
            #expect(!client.isClosed)
            #expect(later.contains { $0.stream == 13 && $0.type == HTTP2Wire.FrameType.headers.rawValue })
            #expect(proxy.origin.requests.map(\.uri) == ["/screens/a"], "one fill; the malformed request never left")
            await client.close()
        }
    }

    @Test(
        "a request whose content-length its END_STREAM contradicts is reset alone, never opened: the connection serves on"
    )
    func contentLengthContradicted() async throws {
        try await ProxyHarness.run { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            var bytes = HTTP2Wire.connectionStart()
            // swift-nio-http2 refuses the stream in its HEADERS frame: it reports the stream closed without having
            // reported it open.
            var bad = HTTP2Wire.request(
                stream: 1,
                method: "POST",
                path: "/screens/b",
                fields: [("content-length", "5")]
            )
            var good = HTTP2Wire.request(stream: 3, path: "/screens/a")
            bytes.writeBuffer(&bad)
            bytes.writeBuffer(&good)
            try await client.send(bytes)
            let frames = try await Self.frames(on: client) { frames in
                frames.contains { $0.stream == 3 && $0.flags & HTTP2Wire.endStream != 0 }
                    && frames.contains { $0.type == HTTP2Wire.FrameType.rstStream.rawValue && $0.stream == 1 }
            }
            #expect(Self.goAway(in: frames) == nil)
            let again = HTTP2Wire.request(stream: 5, path: "/screens/a")
            try await client.send(again)
            _ = try await Self.frames(on: client) {
                $0.contains { $0.stream == 5 && $0.flags & HTTP2Wire.endStream != 0 }
            }
            #expect(!client.isClosed)
            #expect(proxy.origin.requests.map(\.uri) == ["/screens/a"])
            await client.close()
        }
    }

    @Test("an HTTP/2 connection with no stream open for limits.idleTimeout gets GOAWAY and is closed, silent or not")
    func idleConnectionCloses() async throws {
        // Long enough that a stalled machine still reads the preface before the wait for first bytes ends; the limit's
        // own timing is HTTP2ConnectionLifecycleHandlerTests' (virtual time).
        try await ProxyHarness.run(configure: { $0.limits.idleTimeout = .seconds(2) }) { proxy in
            // The preface goes out as the connection opens: the wait for a client's first bytes is the same limit.
            let client = try await RawConnection(port: proxy.server.publicPort, first: HTTP2Wire.connectionStart())
            let frames = try await Self.frames(on: client, until: { Self.goAway(in: $0) != nil })
            #expect(Self.goAway(in: frames)?.errorCode == HTTP2Wire.noError)
            _ = try await client.readUntilClosed()
            #expect(client.isClosed, "closed without waiting for the client to answer anything")
        }
    }

    @Test("a header block split over a flood of CONTINUATION frames is cut off with GOAWAY before it is routed")
    func continuationFlood() async throws {
        try await ProxyHarness.run { proxy in
            let attacker = try await RawConnection(port: proxy.server.publicPort)
            var bytes = HTTP2Wire.connectionStart()
            var headers = HTTP2Wire.frame(
                .headers,
                flags: HTTP2Wire.endStream,
                stream: 1,
                payload: HTTP2Wire.requestBlock(path: "/screens/flood")
            )
            bytes.writeBuffer(&headers)
            for index in 0..<100 {
                var field = ByteBuffer()
                field.writeInteger(UInt8(0))
                field.writeInteger(UInt8(1))
                field.writeString("x")
                field.writeInteger(UInt8(4))
                field.writeString(String(format: "%04d", index))
                var continuation = HTTP2Wire.frame(.continuation, stream: 1, payload: field)
                bytes.writeBuffer(&continuation)
            }
            try? await attacker.send(bytes)
            let frames = try await Self.frames(on: attacker, until: { Self.goAway(in: $0) != nil })
            #expect(Self.goAway(in: frames) != nil)
            #expect(try await proxy.get("/screens/honest").status == .ok)
            #expect(proxy.origin.requests.map(\.uri) == ["/screens/honest"])
            await attacker.close()
        }
    }

    @Test("a client that floods SETTINGS frames gets GOAWAY and is closed")
    func settingsFlood() async throws {
        try await ProxyHarness.run { proxy in
            let attacker = try await RawConnection(port: proxy.server.publicPort)
            var bytes = HTTP2Wire.connectionStart()
            for _ in 0..<300 {
                var settings = HTTP2Wire.frame(.settings, stream: 0)
                bytes.writeBuffer(&settings)
            }
            try? await attacker.send(bytes)
            let frames = try await Self.frames(on: attacker, until: { Self.goAway(in: $0) != nil })
            #expect(Self.goAway(in: frames)?.errorCode == HTTP2Wire.enhanceYourCalm)
            _ = try await attacker.readUntilClosed()
            #expect(attacker.isClosed)
        }
    }

    /// Frames that are errors of the whole connection (RFC 9113 section 5.4.1), each from swift-nio-http2's connection
    /// state machine under its own error type.
    enum ConnectionViolation: String, CaseIterable, Sendable {
        /// SETTINGS_ENABLE_PUSH may only be 0 or 1 (section 6.5.2).
        case invalidSetting = "an invalid SETTINGS value"
        /// A SETTINGS frame whose payload is not a whole number of settings (section 6.5), a FRAME_SIZE_ERROR.
        case badSettings = "a SETTINGS frame of a length no setting has"

        /// The error code its GOAWAY carries.
        var errorCode: UInt32 { self == .badSettings ? HTTP2Wire.frameSizeError : HTTP2Wire.protocolError }

        var bytes: ByteBuffer {
            switch self {
            case .invalidSetting:
                return HTTP2Wire.connectionStart(settings: [(0x2, 2)])
            case .badSettings:
                var bytes = HTTP2Wire.connectionStart()
                var settings = HTTP2Wire.frame(.settings, stream: 0, payload: ByteBuffer(bytes: [0, 2, 0]))
                bytes.writeBuffer(&settings)
                return bytes
            }
        }
    }

    @Test(
        "a connection error gets GOAWAY and the connection closes at once, not at the idle limit",
        arguments: ConnectionViolation.allCases
    )
    func connectionErrorCloses(_ violation: ConnectionViolation) async throws {
        try await ProxyHarness.run(configure: { $0.limits.idleTimeout = .seconds(600) }) { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            try? await client.send(violation.bytes)
            let frames = try await Self.frames(on: client, until: { Self.goAway(in: $0) != nil })
            #expect(Self.goAway(in: frames)?.errorCode == violation.errorCode, "\(violation.rawValue)")
            _ = try await client.readUntilClosed()
            #expect(client.isClosed)
        }
    }

    @Test("listen.http2Limits.maxConcurrentStreams: a client that opens more at once gets GOAWAY and is closed")
    func concurrentStreamLimit() async throws {
        try await ProxyHarness.run(configure: { $0.listenProtocols.maxConcurrentStreams = 2 }) { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            let settings = try await Self.startAcknowledged(client)
            #expect(Self.setting(0x3, in: settings) == 2, "the limit is announced")
            // Three streams opened and left open (no END_STREAM): the third is one too many. swift-nio-http2 takes
            // that as a connection error (RFC 9113 section 5.1.2 allows a stream error or this).
            var bytes = ByteBuffer()
            for stream in [UInt32(1), 3, 5] {
                var headers = HTTP2Wire.frame(
                    .headers,
                    flags: HTTP2Wire.endHeaders,
                    stream: stream,
                    payload: HTTP2Wire.requestBlock(
                        method: "POST",
                        path: "/api/orders",
                        fields: [("content-length", "2")]
                    )
                )
                bytes.writeBuffer(&headers)
            }
            try await client.send(bytes)
            let frames = try await Self.frames(on: client, until: { Self.goAway(in: $0) != nil })
            #expect(Self.goAway(in: frames)?.errorCode == HTTP2Wire.protocolError)
            _ = try await client.readUntilClosed()
            #expect(client.isClosed)
            #expect(proxy.origin.requests.isEmpty)
        }
    }

    @Test("listen.http2Limits.maxHeaderListBytes: a header list past it is refused before it is routed")
    func headerListLimit() async throws {
        try await ProxyHarness.run(configure: { $0.listenProtocols.maxHeaderListBytes = 1024 }) { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            let settings = try await Self.startAcknowledged(client)
            #expect(Self.setting(0x6, in: settings) == 1024)
            var bytes = ByteBuffer()
            var headers = HTTP2Wire.frame(
                .headers,
                flags: HTTP2Wire.endStream | HTTP2Wire.endHeaders,
                stream: 1,
                payload: HTTP2Wire.requestBlock(
                    path: "/screens/large",
                    fields: [("x-large", String(repeating: "a", count: 4000))]
                )
            )
            bytes.writeBuffer(&headers)
            try await client.send(bytes)
            let frames = try await Self.frames(on: client) { frames in
                Self.goAway(in: frames) != nil
                    || frames.contains { $0.type == HTTP2Wire.FrameType.rstStream.rawValue && $0.stream == 1 }
            }
            #expect(
                !frames.contains { $0.type == HTTP2Wire.FrameType.headers.rawValue },
                "no answer: it was not routed"
            )
            #expect(proxy.origin.requests.isEmpty)
            await client.close()
        }
    }

    /// Opens an HTTP/2 connection as a client does: the preface and its SETTINGS, then, once the server's SETTINGS
    /// have come, their acknowledgement, which the server's limits wait for. Returns the server's SETTINGS frame.
    private static func startAcknowledged(_ client: RawConnection) async throws -> HTTP2Wire.Frame {
        try await client.send(HTTP2Wire.connectionStart())
        let frames = try await Self.frames(on: client) { frames in
            frames.contains { $0.type == HTTP2Wire.FrameType.settings.rawValue && $0.flags & HTTP2Wire.ack == 0 }
        }
        try await client.send(HTTP2Wire.frame(.settings, flags: HTTP2Wire.ack, stream: 0))
        return try #require(
            frames.first { $0.type == HTTP2Wire.FrameType.settings.rawValue && $0.flags & HTTP2Wire.ack == 0 }
        )
    }

    /// The value of setting `identifier` in a SETTINGS frame, if it has one.
    private static func setting(_ identifier: UInt16, in frame: HTTP2Wire.Frame) -> UInt32? {
        var payload = frame.payload
        while payload.readableBytes >= 6 {
            let id = payload.readInteger(as: UInt16.self)!
            let value = payload.readInteger(as: UInt32.self)!
            if id == identifier { return value }
        }
        return nil
    }

    @Test("flow control: a body goes out only as far as the client's window lets it, and the rest once it opens")
    func flowControl() async throws {
        let large = ",\"text\":\"" + String(repeating: "x", count: 100_000) + "\""
        let origin: TestOrigin.Responder = { _ in .component(extra: large) }
        try await ProxyHarness.run(origin: origin) { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            // SETTINGS_INITIAL_WINDOW_SIZE (4): 1,000 bytes a stream.
            var bytes = HTTP2Wire.connectionStart(settings: [(0x4, 1_000)])
            var headers = HTTP2Wire.request(stream: 1, path: "/screens/large")
            bytes.writeBuffer(&headers)
            try await client.send(bytes)
            let dataBytes: ([HTTP2Wire.Frame]) -> Int = { frames in
                frames.filter { $0.type == HTTP2Wire.FrameType.data.rawValue && $0.stream == 1 }
                    .reduce(0) { $0 + $1.payload.readableBytes }
            }
            _ = try await Self.frames(on: client, until: { dataBytes($0) >= 1_000 })
            // The server answers a PING after whatever it could send before it: the window is all that went out.
            try await client.send(HTTP2Wire.ping(42))
            let pinged = try await Self.frames(on: client) { frames in
                frames.contains { $0.type == HTTP2Wire.FrameType.ping.rawValue && $0.flags & HTTP2Wire.ack != 0 }
            }
            #expect(dataBytes(pinged) == 1_000)

            var open = HTTP2Wire.windowUpdate(1, increment: 1 << 20)
            var connectionWindow = HTTP2Wire.windowUpdate(0, increment: 1 << 20)
            open.writeBuffer(&connectionWindow)
            try await client.send(open)
            let all = try await Self.frames(on: client) { frames in
                frames.contains {
                    $0.type == HTTP2Wire.FrameType.data.rawValue && $0.stream == 1
                        && $0.flags & HTTP2Wire.endStream != 0
                }
            }
            #expect(dataBytes(all) > 100_000, "the whole component, once the window opened")
            await client.close()
        }
    }

    @Test("a stream whose request does not arrive whole within limits.requestTimeout is answered 408, alone")
    func streamRequestTimeout() async throws {
        try await ProxyHarness.run(configure: { $0.limits.requestTimeout = .milliseconds(300) }) { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            var bytes = HTTP2Wire.connectionStart()
            // A POST whose body never comes.
            var headers = HTTP2Wire.request(
                stream: 1,
                method: "POST",
                path: "/api/orders",
                fields: [("content-length", "10")],
                endStream: false
            )
            bytes.writeBuffer(&headers)
            try await client.send(bytes)
            let frames = try await Self.frames(on: client) { frames in
                frames.contains {
                    $0.type == HTTP2Wire.FrameType.data.rawValue && $0.stream == 1
                        && $0.flags & HTTP2Wire.endStream != 0
                }
            }
            let body = frames.filter { $0.type == HTTP2Wire.FrameType.data.rawValue && $0.stream == 1 }
                .map { String(buffer: $0.payload) }.joined()
            #expect(body.contains(#""kind":"requestTimeout""#), "\(body)")
            let reset = try await Self.frames(on: client) { frames in
                frames.contains { $0.type == HTTP2Wire.FrameType.rstStream.rawValue && $0.stream == 1 }
            }
            #expect(
                reset.contains { $0.type == HTTP2Wire.FrameType.rstStream.rawValue && $0.stream == 1 },
                "the stream whose request never came whole is reset after its 408"
            )
            #expect(Self.goAway(in: frames) == nil, "the connection stays")
            #expect(proxy.origin.requests.isEmpty)
            await client.close()
        }
    }

    @Test("a drain sends GOAWAY to an HTTP/2 connection, which closes once the client has seen it")
    func drainSendsGoAway() async throws {
        try await ProxyHarness.run { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            try await client.send(HTTP2Wire.connectionStart())
            _ = try await Self.frames(on: client) { frames in
                frames.contains { $0.type == HTTP2Wire.FrameType.settings.rawValue }
            }
            async let shutdown: Void = proxy.server.shutdown(drainTimeout: .seconds(30))
            // GOAWAY, then a PING: once the client has answered it, no stream it opened can be in flight.
            let frames = try await Self.frames(on: client) { frames in
                Self.goAway(in: frames) != nil && frames.contains { $0.type == HTTP2Wire.FrameType.ping.rawValue }
            }
            #expect(Self.goAway(in: frames)?.errorCode == HTTP2Wire.noError)
            let ping = try #require(frames.first { $0.type == HTTP2Wire.FrameType.ping.rawValue })
            try await client.send(HTTP2Wire.frame(.ping, flags: HTTP2Wire.ack, stream: 0, payload: ping.payload))
            _ = try await client.readUntilClosed()
            #expect(client.isClosed, "no stream open: the connection closes without waiting for the drain's deadline")
            await shutdown
        }
    }
}
