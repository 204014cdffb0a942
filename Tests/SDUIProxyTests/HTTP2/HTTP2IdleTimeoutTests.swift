import NIOCore
import NIOEmbedded
import NIOHTTP2
import Testing

@testable import SDUIProxy

/// The HTTP/2 idle limit on an `EmbeddedChannel`, the streams reported by the events the connection handler sends
/// down the pipeline, time the embedded loop's.
@Suite("The HTTP/2 idle limit")
struct HTTP2IdleTimeoutTests {
    /// A connection with the idle limit (5 s) on it, and `behind` after it; streams reported as the connection
    /// handler reports them, by the events it sends down the pipeline.
    private struct Connection {
        let loop = EmbeddedEventLoop()
        let channel: EmbeddedChannel

        init(behind: (any ChannelHandler)? = nil) throws {
            channel = EmbeddedChannel(loop: loop)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            try channel.pipeline.syncOperations.addHandler(HTTP2IdleTimeout(timeout: .seconds(5)))
            if let behind { try channel.pipeline.syncOperations.addHandler(behind) }
        }

        func opened(_ id: HTTP2StreamID) {
            channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2StreamCreatedEvent(
                    streamID: id,
                    localInitialWindowSize: 65_535,
                    remoteInitialWindowSize: 65_535
                )
            )
        }

        func closed(_ id: HTTP2StreamID) {
            channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: id, reason: nil))
        }

        /// Whether the connection sent GOAWAY.
        func sentGoAway() throws -> Bool {
            guard let frame = try channel.readOutbound(as: HTTP2Frame.self), case .goAway = frame.payload else {
                return false
            }
            return true
        }
    }

    @Test("a connection with no stream gets GOAWAY and is closed at the limit, not before")
    func idleCloses() throws {
        let connection = try Connection()
        let (loop, channel) = (connection.loop, connection.channel)
        loop.advanceTime(by: .seconds(5) - .milliseconds(1))
        #expect(channel.isActive)
        #expect(try channel.readOutbound(as: HTTP2Frame.self) == nil)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try connection.sentGoAway())
        #expect(!channel.isActive)
    }

    @Test("an open stream holds the limit off; the clock starts again when the last stream closes")
    func streamsHoldItOff() throws {
        let connection = try Connection()
        let (loop, channel) = (connection.loop, connection.channel)
        connection.opened(1)
        connection.opened(3)
        loop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "two streams open")
        connection.closed(1)
        loop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "one stream still open")
        connection.closed(3)
        loop.advanceTime(by: .seconds(5) - .milliseconds(1))
        #expect(channel.isActive)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try connection.sentGoAway())
        #expect(!channel.isActive)
    }

    @Test("the limit runs from the last stream's close, however many streams came and went before it")
    func limitRunsFromTheLastClose() throws {
        let connection = try Connection()
        let (loop, channel) = (connection.loop, connection.channel)
        // One stream at a time, as an app asks for its screens: the last closes 3 s in.
        for index in 0..<30 {
            let id = HTTP2StreamID(2 * index + 1)
            connection.opened(id)
            loop.advanceTime(by: .milliseconds(50))
            connection.closed(id)
            loop.advanceTime(by: .milliseconds(50))
        }
        loop.advanceTime(by: .seconds(5) - .milliseconds(50) - .milliseconds(1))
        #expect(channel.isActive, "5 s have not passed since the last close, though they have since the first")
        #expect(try channel.readOutbound(as: HTTP2Frame.self) == nil)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try connection.sentGoAway())
        #expect(!channel.isActive)
    }

    /// Records the stream closes that pass the idle limit, as the connection manager behind it would see them.
    private final class ClosesSeen: ChannelInboundHandler {
        typealias InboundIn = Any
        var closed: [HTTP2StreamID] = []

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? StreamClosedEvent { closed.append(event.streamID) }
            context.fireUserInboundEventTriggered(event)
        }
    }

    @Test("a close of a stream never reported open is not counted, and not passed on to the connection manager")
    func closeOfAStreamNeverOpened() throws {
        let seen = ClosesSeen()
        let connection = try Connection(behind: seen)
        let (loop, channel) = (connection.loop, connection.channel)
        connection.opened(1)
        // A stream refused in its HEADERS frame: reported closed, never open.
        connection.closed(3)
        #expect(seen.closed.isEmpty)
        loop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "stream 1 is still open")
        connection.closed(1)
        #expect(seen.closed == [1])
        loop.advanceTime(by: .seconds(5))
        #expect(try connection.sentGoAway())
    }
}
