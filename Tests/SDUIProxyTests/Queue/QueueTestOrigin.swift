import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP origin on 127.0.0.1 for queue tests: it records every request (with its body and
/// `Idempotency-Key`), answers as it is told, and can be stopped and started again on the same port.
final class QueueTestOrigin: Sendable {
    struct Request: Sendable {
        var method: HTTPMethod
        var uri: String
        var headers: HTTPHeaders
        var body: String
        /// The status it was answered with.
        var status: Int
        var idempotencyKey: String? { headers.first(name: "Idempotency-Key") }
    }

    struct Reply: Sendable {
        var status: HTTPResponseStatus
        var delay: TimeAmount = .zero
        var body: String = "{}"
    }

    private struct State {
        var requests: [Request] = []
        var behaviour: @Sendable (HTTPRequestHead, String, Int) -> Reply = { _, _, _ in Reply(status: .ok) }
        var inFlight = 0
        var maxInFlight = 0
        var server: (any Channel)?
        var connections: [ObjectIdentifier: any Channel] = [:]
        /// 0 until the first start picks an ephemeral port; later starts reuse it.
        var port = 0
    }

    private let state = Mutex(State())
    private let group: any EventLoopGroup
    /// The port, fixed at the first start.
    var port: Int { state.withLock { $0.port } }

    private init(group: any EventLoopGroup) {
        self.group = group
    }

    /// Starts an origin on an ephemeral port (bound once, so no other test can take it in between).
    static func start(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> QueueTestOrigin
    {
        let origin = QueueTestOrigin(group: group)
        try await origin.start()
        return origin
    }

    /// Starts listening (again) on ``port``.
    func start() async throws {
        let channel = try await Self.bind(group: group, port: port, origin: self)
        state.withLock { state in
            state.server = channel
            if state.port == 0 { state.port = channel.localAddress?.port ?? 0 }
        }
    }

    /// Stops listening and closes every open connection: clients see the origin as down.
    func stop() async throws {
        let (server, connections) = state.withLock { state in
            defer {
                state.server = nil
                state.connections = [:]
            }
            return (state.server, Array(state.connections.values))
        }
        try await server?.close()
        for connection in connections { try? await connection.close() }
    }

    /// How the origin answers: the request head, its body and the number of requests before it.
    func setBehaviour(_ behaviour: @escaping @Sendable (HTTPRequestHead, String, Int) -> Reply) {
        state.withLock { $0.behaviour = behaviour }
    }

    var requests: [Request] { state.withLock { $0.requests } }
    /// Requests that were answered with 2xx.
    var successfulRequests: [Request] { requests.filter { (200..<300).contains($0.status) } }
    var maxInFlight: Int { state.withLock { $0.maxInFlight } }
    var inFlight: Int { state.withLock { $0.inFlight } }
    var url: String { "http://127.0.0.1:\(port)" }

    private static func bind(group: any EventLoopGroup, port: Int, origin: QueueTestOrigin) async throws -> any Channel
    {
        try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                origin.state.withLock { $0.connections[ObjectIdentifier(channel)] = channel }
                channel.closeFuture.whenComplete { _ in
                    _ = origin.state.withLock { $0.connections.removeValue(forKey: ObjectIdentifier(channel)) }
                }
                return channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(OriginHandler(origin: origin))
                }
            }
            .bind(host: "127.0.0.1", port: port)
            .get()
    }

    fileprivate func begin(_ head: HTTPRequestHead, body: String) -> Reply {
        state.withLock { state in
            let reply = state.behaviour(head, body, state.requests.count)
            state.requests.append(
                Request(
                    method: head.method,
                    uri: head.uri,
                    headers: head.headers,
                    body: body,
                    status: Int(reply.status.code)
                )
            )
            state.inFlight += 1
            state.maxInFlight = max(state.maxInFlight, state.inFlight)
            return reply
        }
    }

    fileprivate func end() {
        state.withLock { $0.inFlight -= 1 }
    }
}

private final class OriginHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let origin: QueueTestOrigin
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(origin: QueueTestOrigin) {
        self.origin = origin
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
        case .body(var part):
            body.writeBuffer(&part)
        case .end:
            guard let head else { return }
            let reply = origin.begin(head, body: String(buffer: body))
            let keepAlive = head.isKeepAlive
            if reply.delay > .zero {
                context.eventLoop.assumeIsolated().scheduleTask(in: reply.delay) {
                    self.respond(context: context, reply: reply, keepAlive: keepAlive)
                }
            } else {
                respond(context: context, reply: reply, keepAlive: keepAlive)
            }
        }
    }

    private func respond(context: ChannelHandlerContext, reply: QueueTestOrigin.Reply, keepAlive: Bool) {
        let bytes = ByteBuffer(string: reply.body)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: String(bytes.readableBytes))
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: reply.status, headers: headers))),
            promise: nil
        )
        context.write(wrapOutboundOut(.body(.byteBuffer(bytes))), promise: nil)
        let origin = self.origin
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            origin.end()
            if !keepAlive { context.close(promise: nil) }
        }
    }
}
