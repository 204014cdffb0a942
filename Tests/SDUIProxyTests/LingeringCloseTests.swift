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

    /// A client that sends a little every `interval`, `times` times; the connection is open before each send.
    private func keepSending(
        on channel: EmbeddedChannel,
        _ loop: EmbeddedEventLoop,
        every interval: TimeAmount,
        times: Int
    ) throws {
        for _ in 0..<times {
            loop.advanceTime(by: interval)
            #expect(channel.isActive)
            try channel.writeInbound(ByteBuffer(string: "more"))
            channel.pipeline.fireChannelReadComplete()
        }
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
        try keepSending(on: channel, loop, every: .seconds(4), times: 7)
        // 28 s in: the quiet timeout would end at 32 s, the maximum ends it at 30 s.
        loop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }

    @Test("a drain cuts a lingering close to the draining limits: 1 s of quiet, 2 s in all")
    func drainShortensTheLinger() throws {
        let (quiet, quietLoop) = try lingering()
        quiet.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        quietLoop.advanceTime(by: .milliseconds(900))
        #expect(quiet.isActive)
        quietLoop.advanceTime(by: .milliseconds(100))
        #expect(!quiet.isActive)

        let (busy, busyLoop) = try lingering()
        busy.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        try keepSending(on: busy, busyLoop, every: .milliseconds(600), times: 3)
        busyLoop.advanceTime(by: .milliseconds(200))
        #expect(!busy.isActive)
    }

    @Test("a shutdown past its drain deadline closes a lingering connection at once")
    func closeNowEndsTheLinger() throws {
        let (channel, _) = try lingering()
        channel.pipeline.fireUserInboundEventTriggered(ConnectionLimiter.CloseNow())
        #expect(!channel.isActive)
    }
}
