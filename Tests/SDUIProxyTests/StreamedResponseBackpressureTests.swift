import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A forwarded response streamed to an HTTP/1.1 client: a body part is taken (and the forward reads on from the
/// backend) while the client's channel is under its high-water mark, and not before it is again once it is past it.
/// The channel's writability is the embedded channel's, set by the test.
@Suite("A streamed response waits for a client that takes no more")
struct StreamedResponseBackpressureTests {
    /// Whether a future completed, and how.
    final class Outcome: Sendable {
        private let result = NIOLockedValueBox<Result<Void, any Error>?>(nil)

        init(_ future: EventLoopFuture<Void>) {
            future.whenComplete { [result] outcome in result.withLockedValue { $0 = outcome } }
        }

        var isPending: Bool { result.withLockedValue { $0 == nil } }
        var succeeded: Bool { result.withLockedValue { (try? $0?.get()) != nil } }
        var failed: Bool {
            result.withLockedValue {
                if case .failure = $0 { return true }
                return false
            }
        }
    }

    /// A pass-through GET whose backend has answered its head, 10 bytes to come.
    private static func forwardAnswering(_ connection: EmbeddedPublicConnection) throws -> ScriptedForward {
        try connection.send("GET /api/report HTTP/1.1\r\nHost: app.example\r\n\r\n")
        let forward = try #require(connection.backend.forwards.first)
        forward.sink.receiveHead(status: .ok, fields: HTTPFieldLines(["Content-Length": "10"]), bodyLength: 10)
        return forward
    }

    private static func bypassing(_ configuration: inout ProxyConfiguration) {
        var policy = configuration.cache.policy
        policy.bypass = true
        configuration.cache.routes.append(.init(prefix: "/api/", policy: policy))
    }

    @Test("while the client takes more, a part is taken at once; past the mark, once the channel is writable again")
    func partsWaitForWritability() throws {
        try EmbeddedPublicConnection.run(Self.bypassing) { connection in
            let forward = try Self.forwardAnswering(connection)
            let first = Outcome(forward.sink.receiveBodyPart(ByteBuffer(string: "01234")))
            connection.runLoop()
            #expect(first.succeeded, "under the high-water mark")

            connection.channel.isWritable = false
            let second = Outcome(forward.sink.receiveBodyPart(ByteBuffer(string: "56789")))
            connection.runLoop()
            #expect(second.isPending, "the client takes no more: the forward reads no more of the backend")
            #expect(connection.unreadOutput.hasSuffix("0123456789"), "the part itself is written")

            connection.channel.isWritable = true
            connection.channel.pipeline.fireChannelWritabilityChanged()
            connection.runLoop()
            #expect(second.succeeded)
            forward.sink.receiveEnd()
            let response = try #require(try connection.readResponse())
            #expect(response.body == "0123456789")
            #expect(connection.isOpen)
        }
    }

    @Test("a part waiting for room fails when the client goes")
    func waitingPartFailsOnClose() throws {
        try EmbeddedPublicConnection.run(Self.bypassing) { connection in
            let forward = try Self.forwardAnswering(connection)
            connection.channel.isWritable = false
            let waiting = Outcome(forward.sink.receiveBodyPart(ByteBuffer(string: "01234")))
            connection.runLoop()
            #expect(waiting.isPending)
            connection.channel.pipeline.fireChannelInactive()
            connection.runLoop()
            #expect(waiting.failed)
        }
    }
}
