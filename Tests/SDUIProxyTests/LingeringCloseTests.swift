import NIOCore
import NIOEmbedded
import NIOExtras
import Testing

@testable import SDUIProxy

@Suite("Lingering close: reading past an answer, within bounds")
struct LingeringCloseTests {
    private let limits = LingeringClose.Limits(quietTimeout: .seconds(5), maximumTime: .seconds(30))

    private func lingering() throws -> (EmbeddedChannel, EmbeddedEventLoop) {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try channel.pipeline.syncOperations.addHandler(LingeringClose(limits: limits))
        return (channel, loop)
    }

    @Test("what the client sends is dropped, and a client that goes quiet is closed after the quiet timeout")
    func quietClientIsClosed() throws {
        let (channel, loop) = try lingering()
        try channel.writeInbound(ByteBuffer(string: "rest of a refused body"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        loop.advanceTime(by: .seconds(4))
        #expect(channel.isActive)
        loop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive)
    }

    @Test("each read restarts the quiet timeout, but a client that never stops is closed at the maximum")
    func endlessClientIsClosed() throws {
        let (channel, loop) = try lingering()
        for _ in 0..<7 {
            loop.advanceTime(by: .seconds(4))
            #expect(channel.isActive)
            try channel.writeInbound(ByteBuffer(string: "more"))
            channel.pipeline.fireChannelReadComplete()
        }
        // 28 s in: the quiet timeout would end at 32 s, the maximum ends it at 30 s.
        loop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }

    @Test("a drain closes a lingering connection at once: its answer is out")
    func drainEndsTheLinger() throws {
        let (channel, _) = try lingering()
        channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        #expect(!channel.isActive)
    }
}
