import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The idle limit and the drain of an ``HTTP2Connection`` on an `EmbeddedChannel`: streams opened by their HEADERS
/// frames (GETs whose backend never answers, so they stay open) and closed by the events `NIOHTTP2Handler` sends,
/// time the embedded loop's. The decisions themselves are `HTTP2ConnectionLifecycle`'s, tested on their own.
@Suite("An HTTP/2 connection's idle limit and drain")
struct HTTP2ConnectionLifecycleHandlerTests {
    /// A connection with an idle limit of 5 s and a drain grace of 30 s; `front`, when given, sits between it and
    /// the socket.
    private final class Connection {
        let loop = EmbeddedEventLoop()
        let channel: EmbeddedChannel

        init(front: (any ChannelHandler)? = nil) throws {
            loop.advanceTime(to: .now())
            var configuration = ProxyConfiguration()
            configuration.upstream.url = "http://backend.invalid"
            configuration.limits.idleTimeout = .seconds(5)
            configuration.limits.requestTimeout = .seconds(600)
            let context = EmbeddedPublicConnection.makeContext(configuration, backend: ScriptedNetworkClient())
            channel = EmbeddedChannel(loop: loop)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40_000)).wait()
            if let front { try channel.pipeline.syncOperations.addHandler(front) }
            let connection = HTTP2Connection(
                runtime: ProxyRuntime(context),
                eventLoop: loop,
                requests: RequestTally(),
                isSecure: true,
                drainGrace: .seconds(30)
            )
            try channel.pipeline.syncOperations.addHandler(connection)
        }

        /// A GET on stream `id`: the backend never answers, so the stream stays open until ``closed(_:)``.
        func opened(_ id: HTTP2StreamID) throws {
            let block = HPACKHeaders([
                (":method", "GET"), (":scheme", "https"), (":path", "/screens/\(id)"), (":authority", "app.example"),
            ])
            try channel.writeInbound(
                HTTP2Frame(streamID: id, payload: .headers(.init(headers: block, endStream: true)))
            )
        }

        func closed(_ id: HTTP2StreamID) {
            channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: id, reason: .cancel))
        }

        /// The connection's own frames written so far (stream 0): GOAWAY's last stream ids and PING payloads.
        func connectionFrames() throws -> [HTTP2Frame.FramePayload] {
            var frames: [HTTP2Frame.FramePayload] = []
            while let frame = try channel.readOutbound(as: HTTP2Frame.self) {
                if frame.streamID == .rootStream { frames.append(frame.payload) }
            }
            return frames
        }

        func goAways() throws -> [HTTP2StreamID] {
            try connectionFrames().compactMap {
                if case .goAway(let last, .noError, _) = $0 { return last }
                return nil
            }
        }

        func finish() {
            _ = try? channel.finish(acceptAlreadyClosed: true)
        }
    }

    @Test("a connection with no stream gets GOAWAY and is closed at the limit, not before")
    func idleCloses() throws {
        let connection = try Connection()
        defer { connection.finish() }
        let (loop, channel) = (connection.loop, connection.channel)
        loop.advanceTime(by: .seconds(5) - .milliseconds(1))
        #expect(channel.isActive)
        #expect(try connection.goAways().isEmpty)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try connection.goAways() == [.rootStream])
        #expect(!channel.isActive)
    }

    /// Holds every write and never completes it: a client that reads nothing, its socket full.
    private final class StuckSocket: ChannelOutboundHandler {
        typealias OutboundIn = Any
        private(set) var held = 0

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            held += 1
        }
    }

    @Test("a client that reads nothing is closed at the limit all the same, its GOAWAY never out")
    func idleClosesAStuckClient() throws {
        let stuck = StuckSocket()
        let connection = try Connection(front: stuck)
        defer { connection.finish() }
        connection.loop.advanceTime(by: .seconds(5))
        #expect(stuck.held == 1, "the GOAWAY, written and held")
        #expect(!connection.channel.isActive)
    }

    @Test("an open stream holds the limit off; the clock starts again when the last stream closes")
    func streamsHoldItOff() throws {
        let connection = try Connection()
        defer { connection.finish() }
        let (loop, channel) = (connection.loop, connection.channel)
        try connection.opened(1)
        try connection.opened(3)
        loop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "two streams open")
        connection.closed(1)
        loop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "one stream still open")
        connection.closed(3)
        loop.advanceTime(by: .seconds(5) - .milliseconds(1))
        #expect(channel.isActive)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try connection.goAways() == [.rootStream])
        #expect(!channel.isActive)
    }

    @Test("the limit runs from the last stream's close, however many streams came and went before it")
    func limitRunsFromTheLastClose() throws {
        let connection = try Connection()
        defer { connection.finish() }
        let (loop, channel) = (connection.loop, connection.channel)
        // One stream at a time, as an app asks for its screens: the last closes 3 s in.
        for index in 0..<30 {
            let id = HTTP2StreamID(2 * index + 1)
            try connection.opened(id)
            loop.advanceTime(by: .milliseconds(50))
            connection.closed(id)
            loop.advanceTime(by: .milliseconds(50))
        }
        loop.advanceTime(by: .seconds(5) - .milliseconds(50) - .milliseconds(1))
        #expect(channel.isActive, "5 s have not passed since the last close, though they have since the first")
        #expect(try connection.goAways().isEmpty)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try connection.goAways() == [.rootStream])
        #expect(!channel.isActive)
    }

    @Test("a close of a stream never opened here (refused in its HEADERS) does not count against the open ones")
    func closeOfAStreamNeverOpened() throws {
        let connection = try Connection()
        defer { connection.finish() }
        let (loop, channel) = (connection.loop, connection.channel)
        try connection.opened(1)
        connection.closed(3)
        loop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "stream 1 is still open")
        connection.closed(1)
        loop.advanceTime(by: .seconds(5))
        #expect(try connection.goAways() == [.rootStream])
        #expect(!channel.isActive)
    }

    @Test("a drain sends GOAWAY and PING; the PING's ACK brings the last GOAWAY; the last stream's close, the close")
    func drain() throws {
        let connection = try Connection()
        defer { connection.finish() }
        let (loop, channel) = (connection.loop, connection.channel)
        try connection.opened(1)
        try connection.opened(3)
        channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        let announced = try connection.connectionFrames()
        guard announced.count == 2, case .goAway(.maxID, .noError, _) = announced[0],
            case .ping(let ping, ack: false) = announced[1]
        else {
            Issue.record("expected GOAWAY with the highest stream id, then PING: \(announced)")
            return
        }
        try connection.opened(5)  // on its way before the client read the GOAWAY: still served
        try channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .ping(ping, ack: true)))
        #expect(try connection.goAways() == [5])
        connection.closed(1)
        connection.closed(5)
        loop.run()
        #expect(channel.isActive, "stream 3 is still open")
        loop.advanceTime(by: .seconds(20))
        #expect(channel.isActive, "within the grace, and the idle limit is not the drain's")
        connection.closed(3)
        loop.run()
        #expect(!channel.isActive, "closed a turn of the loop after the last stream")
    }

    @Test("a drain whose client never acknowledges the PING ends at the grace, its streams with it")
    func drainGrace() throws {
        let connection = try Connection()
        defer { connection.finish() }
        let (loop, channel) = (connection.loop, connection.channel)
        try connection.opened(1)
        channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        #expect(try connection.connectionFrames().count == 2)
        try channel.writeInbound(
            HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 7), ack: true))
        )
        #expect(try connection.goAways().isEmpty, "an ACK of some other PING")
        loop.advanceTime(by: .seconds(30) - .milliseconds(1))
        #expect(channel.isActive)
        loop.advanceTime(by: .milliseconds(1))
        #expect(!channel.isActive)
    }
}
