import NIOCore
import NIOEmbedded
import NIOHTTP1
import SDUIProxyCore

@testable import SDUIProxy

/// One upstream connection's handler in an `EmbeddedChannel`, with a pool it reports to: exchanges sent on it as
/// the loop-local client sends them (a cache fill, or a forward with its sink), the bytes it writes, and the
/// backend's bytes fed to it.
struct UpstreamConnectionFixture {
    let loop = EmbeddedEventLoop()
    let channel: EmbeddedChannel
    let handler: UpstreamConnectionHandler
    let reads = ReadCounter()
    let writes = WriteHolder()
    let sink: RecordingSink
    /// What the connection told its pool.
    let pool = RecordingPool()

    init() throws {
        handler = UpstreamConnectionHandler(eventLoop: loop, pool: pool, id: .init(0))
        channel = EmbeddedChannel(loop: loop)
        sink = RecordingSink(eventLoop: loop)
        try channel.pipeline.syncOperations.addHandler(reads)
        try channel.pipeline.syncOperations.addHandler(writes)
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
    }

    /// Sends a POST with `body` on the connection, as ``LoopLocalHTTPClient/forward(_:body:on:to:completion:)`` does; its
    /// outcome is recorded in the returned box, which also holds the exchange weakly.
    func forward(body: RequestBodyStream?) -> Outcome {
        let outcome = Outcome()
        let forwarding = ForwardedExchange(
            sink: sink,
            body: body,
            isChunked: body != nil && body?.contentLength == nil,
            headTimeout: .seconds(5),
            on: loop
        ) { outcome.result = $0 }
        let exchange = LoopLocalHTTPClient.Exchange(
            request: ByteBuffer(string: "POST /form HTTP/1.1\r\nHost: x\r\n\r\n"),
            isHEAD: false,
            mayResend: false,
            maxBodyBytes: .max,
            budget: nil,
            deadline: loop.now + .seconds(5),
            bodyIdleTimeout: .seconds(30),
            interim: nil,
            forwarding: forwarding
        )
        outcome.exchange = forwarding
        forwarding.watchBody()
        handler.send(exchange, retryIfStale: false) { forwarding.connectionEnded($0) }
        return outcome
    }

    /// Sends a cache fill's GET on the connection; its outcome is recorded in the returned box. With
    /// `retryIfStale`, as on a reused connection, whose pool may send it again (see ``RecordingPool``).
    func fetch(retryIfStale: Bool = false, maxBodyBytes: Int = 1 << 20, budget: ByteBudget? = nil) -> FillOutcome {
        let exchange = LoopLocalHTTPClient.Exchange(
            request: ByteBuffer(string: "GET /screen HTTP/1.1\r\nHost: x\r\n\r\n"),
            isHEAD: false,
            mayResend: false,
            maxBodyBytes: maxBodyBytes,
            budget: budget,
            deadline: loop.now + .seconds(5),
            bodyIdleTimeout: .seconds(30),
            interim: nil
        )
        let outcome = FillOutcome()
        handler.send(exchange, retryIfStale: retryIfStale) { outcome.result = $0 }
        return outcome
    }

    /// Everything written to the backend since the last call, as text.
    func written() throws -> String {
        var text = ""
        while let part = try channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: part) }
        return text
    }

    func receive(_ text: String) throws {
        try channel.writeInbound(ByteBuffer(string: text))
    }

    /// Counts the reads that get past the connection's handler to the channel.
    final class ReadCounter: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var reads = 0

        func read(context: ChannelHandlerContext) {
            reads += 1
            context.read()
        }
    }

    /// Holds the promises of the writes that reach it while `holding`: a backend that stopped reading.
    final class WriteHolder: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var holding = false
        var held: [EventLoopPromise<Void>] = []

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            guard holding else { return context.write(data, promise: promise) }
            context.write(data, promise: nil)
            if let promise { held.append(promise) }
        }
    }

    /// Records what it is given; with `holds`, keeps each part until the test lets it go.
    final class RecordingSink: ForwardedResponseSink, @unchecked Sendable {
        let eventLoop: EmbeddedEventLoop
        var holds = false
        var interim: [HTTPResponseStatus] = []
        var head: HTTPResponseStatus?
        var parts: [String] = []
        var held: [EventLoopPromise<Void>] = []
        var ended = false

        init(eventLoop: EmbeddedEventLoop) {
            self.eventLoop = eventLoop
        }

        func receiveInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {
            interim.append(status)
        }

        func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
            head = status
        }

        func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            parts.append(String(buffer: buffer))
            guard holds else { return eventLoop.makeSucceededVoidFuture() }
            let promise = eventLoop.makePromise(of: Void.self)
            held.append(promise)
            return promise.futureResult
        }

        func receiveEnd() {
            ended = true
        }
    }

    final class FillOutcome: @unchecked Sendable {
        var result: Result<UpstreamResponse, any Error>?
    }

    final class Outcome: @unchecked Sendable {
        var result: Result<Void, any Error>?
        /// The exchange, while something else keeps it.
        weak var exchange: ForwardedExchange?
        var succeeded: Bool { if case .success = result { true } else { false } }
        var failure: (any Error)? { if case .failure(let error) = result { error } else { nil } }
    }

    /// A pool that records what its connection tells it, and passes each exchange's end to its caller as the
    /// pool does, without sending anything again: whether it would have is in ``ended``.
    final class RecordingPool: UpstreamConnectionEvents, @unchecked Sendable {
        struct Ended {
            var result: Result<UpstreamResponse, any Error>
            var retryIfStale: Bool
            /// Whether the pool would send the exchange again on another connection.
            var wouldResend: Bool { PoolState.sendsAgain(result, retryIfStale: retryIfStale) }
        }

        var ended: [Ended] = []
        var closed = 0
        /// What the connection told, in order: `ended` and `closed`.
        var told: [String] = []

        func exchangeEnded(
            _ result: Result<UpstreamResponse, any Error>,
            on connection: UpstreamConnectionHandler,
            _ exchange: LoopLocalHTTPClient.Exchange,
            retryIfStale: Bool,
            _ completion: @escaping PoolState.Completion
        ) {
            ended.append(Ended(result: result, retryIfStale: retryIfStale))
            told.append("ended")
            completion(result.mapError { PoolState.proxyError($0) })
        }

        func connectionClosed(_ id: UpstreamPoolStateMachine.ConnectionID) {
            closed += 1
            told.append("closed")
        }
    }
}
