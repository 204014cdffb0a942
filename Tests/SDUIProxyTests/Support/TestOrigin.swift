import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A real HTTP origin on 127.0.0.1 for end-to-end tests: it records every request and answers with what the
/// test's responder returns.
final class TestOrigin: Sendable {
    struct Request: Sendable {
        var method: HTTPMethod
        var uri: String
        var headers: HTTPHeaders
        var body: ByteBuffer
        /// The status the origin answered with.
        var status: HTTPResponseStatus = .ok
        /// The connection it came on: 1 for the first the origin accepted, and so on.
        var connection = 0
    }

    struct Response: Sendable {
        var status: HTTPResponseStatus = .ok
        var headers: [(String, String)] = [("Content-Type", "application/json")]
        var body: String = ""
        /// Bytes to send as the body instead of ``body``'s text: a body in a content coding.
        var rawBody: [UInt8]?
        /// How long to wait before answering.
        var delay: TimeAmount = .zero
        /// Answer only once this gate is open (and then after `delay`).
        var heldBy: OriginGate?
        /// Send the body with chunked encoding instead of a Content-Length.
        var chunked = false
        /// The Content-Length to declare instead of the body's own (for answers that have no body, like 304).
        var declaredLength: Int?
        /// Send the head, then the body in this many pieces, each flushed `pieceGap` after the one before, so the
        /// peer reads them apart.
        var bodyPieces = 1
        var pieceGap: TimeAmount = .milliseconds(20)
        /// Close the connection once the answer is written, though the answer says keep-alive: a backend that
        /// drops idle keep-alive connections at once.
        var closeAfterAnswer = false

        static func component(
            _ type: String = "beagle:screenComponent",
            maxAge: Int? = 60,
            extra: String = "",
            delay: TimeAmount = .zero,
            heldBy gate: OriginGate? = nil
        )
            -> Response
        {
            var response = Response(delay: delay, heldBy: gate)
            if let maxAge { response.headers.append(("Cache-Control", "max-age=\(maxAge)")) }
            response.body = #"{"_beagleComponent_":"\#(type)","id":"x"\#(extra)}"#
            return response
        }

        /// This response with one more header line.
        func withHeader(_ name: String, _ value: String) -> Response {
            var response = self
            response.headers.append((name, value))
            return response
        }
    }

    typealias Responder = @Sendable (Request) -> Response

    private let channel: NIOLockedValueBox<(any Channel)?>
    private let recorded = NIOLockedValueBox<[Request]>([])
    private let responder: NIOLockedValueBox<Responder>
    private let group: any EventLoopGroup
    private let boundPort = NIOLockedValueBox(0)
    private let reserved = NIOLockedValueBox<PortReservation?>(nil)

    var port: Int { boundPort.withLockedValue { $0 } }

    /// How connections are wrapped when the origin speaks HTTPS; nil for plain HTTP.
    private let tls: NIOSSLContext?

    /// With `tls`, the origin speaks HTTPS, and its ``url`` is `https://localhost:PORT`.
    init(
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        port: Int = 0,
        tls: NIOSSLContext? = nil,
        responder: @escaping Responder
    ) async throws {
        self.group = group
        self.tls = tls
        self.responder = NIOLockedValueBox(responder)
        self.channel = NIOLockedValueBox(nil)
        let bound = try await Self.bind(group: group, port: port, origin: self)
        self.channel.withLockedValue { $0 = bound }
        self.boundPort.withLockedValue { $0 = bound.localAddress!.port! }
    }

    var url: String { tls == nil ? "http://127.0.0.1:\(port)" : "https://localhost:\(port)" }

    var requests: [Request] { recorded.withLockedValue { $0 } }
    var requestCount: Int { recorded.withLockedValue { $0.count } }

    func requests(to path: String) -> [Request] {
        requests.filter { $0.uri == path }
    }

    func setResponder(_ responder: @escaping Responder) {
        self.responder.withLockedValue { $0 = responder }
    }

    /// Stops listening and closes the open connections: to the proxy, the origin is down. The port stays
    /// reserved until ``restart()`` or the end of the origin, so connections to it are refused and no other
    /// server can take it meanwhile.
    func stop() async throws {
        let channel = self.channel.withLockedValue { current -> (any Channel)? in
            defer { current = nil }
            return current
        }
        if let channel {
            let reservation = try PortReservation(port: port)
            reserved.withLockedValue { $0 = reservation }
            try await channel.close()
        }
        let open = connections.withLockedValue { connections in
            defer { connections.removeAll() }
            return Array(connections.values)
        }
        for connection in open { try? await connection.close() }
    }

    fileprivate let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])
    private let accepted = NIOLockedValueBox(0)

    /// How many connections the origin has accepted since it started.
    var acceptedConnections: Int { accepted.withLockedValue { $0 } }

    private let openCount = NIOLockedValueBox((now: 0, most: 0))

    /// Connections open at the origin's side now, and the most open at once since the start or
    /// ``resetMaxOpenConnections()``.
    var openConnections: Int { openCount.withLockedValue { $0.now } }
    var maxOpenConnections: Int { openCount.withLockedValue { $0.most } }

    /// Starts counting the most connections open at once from the number open now.
    func resetMaxOpenConnections() {
        openCount.withLockedValue { $0.most = $0.now }
    }

    /// Closes the connections open now, as a backend does with idle keep-alive connections.
    func closeOpenConnections() async {
        let open = connections.withLockedValue { Array($0.values) }
        for connection in open { try? await connection.close() }
    }

    /// Listens again on the same port.
    func restart() async throws {
        let bound = try await Self.bind(group: group, port: port, origin: self)
        channel.withLockedValue { $0 = bound }
        reserved.withLockedValue { $0 = nil }
    }

    fileprivate func handle(_ request: Request) -> Response {
        let response = responder.withLockedValue { $0 }(request)
        var answered = request
        answered.status = response.status
        recorded.withLockedValue { $0.append(answered) }
        flight.withLockedValue { flight in
            flight.now += 1
            flight.most = max(flight.most, flight.now)
        }
        return response
    }

    fileprivate func answered() {
        flight.withLockedValue { $0.now -= 1 }
    }

    private let flight = NIOLockedValueBox((now: 0, most: 0))

    /// Requests received whose answers are not written yet, now and at most so far.
    var inFlight: Int { flight.withLockedValue { $0.now } }
    var maxInFlight: Int { flight.withLockedValue { $0.most } }

    private static func bind(group: any EventLoopGroup, port: Int, origin: TestOrigin) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // With SO_REUSEPORT the port can be reserved before the origin stops and listened on again before
            // the reservation goes (see PortReservation).
            .serverChannelOption(.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: 1)
            .childChannelInitializer { channel in
                origin.connections.withLockedValue { $0[ObjectIdentifier(channel)] = channel }
                let number = origin.accepted.withLockedValue { accepted in
                    accepted += 1
                    return accepted
                }
                origin.openCount.withLockedValue { count in
                    count.now += 1
                    count.most = max(count.most, count.now)
                }
                channel.closeFuture.whenComplete { _ in
                    origin.openCount.withLockedValue { $0.now -= 1 }
                    _ = origin.connections.withLockedValue { $0.removeValue(forKey: ObjectIdentifier(channel)) }
                }
                return channel.eventLoop.makeCompletedFuture {
                    if let tls = origin.tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(OriginHandler(origin: origin, connection: number))
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
    }
}

private final class OriginHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let origin: TestOrigin
    private let connection: Int
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(origin: TestOrigin, connection: Int) {
        self.origin = origin
        self.connection = connection
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
            let response = origin.handle(
                TestOrigin.Request(
                    method: head.method,
                    uri: head.uri,
                    headers: head.headers,
                    body: body,
                    connection: connection
                )
            )
            let keepAlive = head.isKeepAlive
            let isHead = head.method == .HEAD
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let eventLoop = context.eventLoop
            let answer: @Sendable () -> Void = {
                eventLoop.scheduleTask(in: response.delay) {
                    let (handler, context) = loopBound.value
                    handler.write(response, keepAlive: keepAlive, isHead: isHead, context: context)
                }
            }
            if let gate = response.heldBy { gate.whenOpen(answer) } else { answer() }
        }
    }

    private func write(_ response: TestOrigin.Response, keepAlive: Bool, isHead: Bool, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers)
        let bodyBytes = response.rawBody ?? Array(response.body.utf8)
        if !response.chunked {
            headers.replaceOrAdd(
                name: "Content-Length",
                value: String(response.declaredLength ?? bodyBytes.count)
            )
        }
        if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers))),
            promise: nil
        )
        var pause = TimeAmount.zero
        if !isHead, !bodyBytes.isEmpty {
            if response.bodyPieces > 1 {
                context.flush()
                let bytes = bodyBytes
                let size = (bytes.count + response.bodyPieces - 1) / response.bodyPieces
                for start in stride(from: 0, to: bytes.count, by: size) {
                    pause = pause + response.pieceGap
                    let piece = ByteBuffer(bytes: bytes[start..<min(start + size, bytes.count)])
                    context.eventLoop.assumeIsolated().scheduleTask(in: pause) {
                        context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(piece))), promise: nil)
                    }
                }
            } else {
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: bodyBytes)))), promise: nil)
            }
        }
        let origin = self.origin
        context.eventLoop.assumeIsolated().scheduleTask(in: pause) {
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
                origin.answered()
                if !keepAlive || response.closeAfterAnswer { context.close(promise: nil) }
            }
        }
    }
}
