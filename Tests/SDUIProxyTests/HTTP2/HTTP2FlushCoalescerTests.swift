import NIOCore
import NIOEmbedded
import Testing

@testable import SDUIProxy

/// One flush a turn of the loop on an HTTP/2 connection, on an `EmbeddedChannel`: what reaches the socket is
/// counted below the coalescer.
@Suite("HTTP/2 flushes, one a turn of the loop")
struct HTTP2FlushCoalescerTests {
    /// Counts the flushes that pass it on their way to the socket.
    private final class FlushCounter: ChannelOutboundHandler {
        typealias OutboundIn = Any
        var flushes = 0

        func flush(context: ChannelHandlerContext) {
            flushes += 1
            context.flush()
        }
    }

    private struct Connection {
        let loop = EmbeddedEventLoop()
        let channel: EmbeddedChannel
        let counter = FlushCounter()

        init() throws {
            channel = EmbeddedChannel(loop: loop)
            try channel.pipeline.syncOperations.addHandler(counter)
            try channel.pipeline.syncOperations.addHandler(HTTP2FlushCoalescer())
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        }

        /// What the streams' tasks do: each writes its answer and flushes.
        func answer(_ text: String) {
            loop.execute {
                channel.write(ByteBuffer(string: text), promise: nil)
                channel.flush()
            }
        }

        func written() throws -> [String] {
            var texts: [String] = []
            while let buffer = try channel.readOutbound(as: ByteBuffer.self) { texts.append(String(buffer: buffer)) }
            return texts
        }
    }

    @Test("three streams answering in one turn reach the socket in one flush, after the last of them")
    func oneFlushForATurn() throws {
        let connection = try Connection()
        connection.answer("a")
        connection.answer("b")
        connection.answer("c")
        #expect(try connection.written().isEmpty, "nothing before the loop turns")
        connection.loop.run()
        #expect(connection.counter.flushes == 1)
        #expect(try connection.written() == ["a", "b", "c"])

        // The next turn flushes again.
        connection.answer("d")
        connection.loop.run()
        #expect(connection.counter.flushes == 2)
        #expect(try connection.written() == ["d"])
    }

    @Test("a close passes a held flush down first: an answer written before it goes out")
    func closeFlushesFirst() throws {
        let connection = try Connection()
        connection.channel.write(ByteBuffer(string: "last answer"), promise: nil)
        connection.channel.flush()
        #expect(connection.counter.flushes == 0, "held")
        connection.channel.close(promise: nil)
        #expect(connection.counter.flushes == 1)
        #expect(try connection.written() == ["last answer"])
        connection.loop.run()
        #expect(connection.counter.flushes == 1, "the held task finds nothing left to flush")
    }
}
