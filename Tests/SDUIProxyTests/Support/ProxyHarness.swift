import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import SDUIProxyCore

@testable import SDUIProxy

/// A real proxy on 127.0.0.1 ephemeral ports in front of a ``TestOrigin``, with an HTTP client to talk to it.
struct ProxyHarness {
    let origin: TestOrigin
    let server: ProxyServer
    let client: HTTPClient

    var baseURL: String { "http://127.0.0.1:\(server.publicPort)" }
    var adminURL: String { "http://127.0.0.1:\(server.adminPort)" }

    static func testConfiguration(upstream: String) -> ProxyConfiguration {
        var configuration = ProxyConfiguration()
        configuration.listen = .init(host: "127.0.0.1", port: 0)
        configuration.admin = .init(host: "127.0.0.1", port: 0)
        configuration.upstream.url = upstream
        // Far above any delay a test origin adds: on a loaded machine a delayed answer can arrive a second late.
        // Tests of the timeout set their own.
        configuration.upstream.timeout = .seconds(10)
        return configuration
    }

    /// `configuration` with a route under `prefix` that bypasses the cache (its requests are forwarded as they
    /// came, with both bodies streamed).
    static func bypassingCache(under prefix: String, in configuration: inout ProxyConfiguration) {
        var policy = configuration.cache.policy
        policy.bypass = true
        configuration.cache.routes.append(.init(prefix: prefix, policy: policy))
    }

    static var logger: Logger {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        return logger
    }

    /// Runs `body` with a proxy in front of a new origin (an HTTPS one with `originTLS`); everything is shut down
    /// afterwards.
    static func run(
        origin responder: @escaping TestOrigin.Responder = { _ in .component() },
        originTLS: NIOSSLContext? = nil,
        configure: ((inout ProxyConfiguration) -> Void)? = nil,
        adminToken: String? = nil,
        eventLoopGroup: (any EventLoopGroup)? = nil,
        tuning: ProxyServer.Tuning = ProxyServer.Tuning(),
        logger: Logger = ProxyHarness.logger,
        _ body: (ProxyHarness) async throws -> Void
    ) async throws {
        // A slot first: none of the test's deadlines runs while it waits for one (see EndToEndSlots).
        try await EndToEndSlots.withSlot {
            let origin = try await TestOrigin(tls: originTLS, responder: responder)
            var configuration = testConfiguration(upstream: origin.url)
            configure?(&configuration)
            let server = try await ProxyServer.start(
                configuration: configuration,
                logger: logger,
                adminAuthorization: AdminAuthorization(token: adminToken),
                eventLoopGroup: eventLoopGroup,
                tuning: tuning
            )
            var clientConfiguration = HTTPClient.Configuration(redirectConfiguration: .disallow)
            // Enough connections that concurrent test requests really are concurrent.
            clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 512
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
            let harness = ProxyHarness(origin: origin, server: server, client: client)
            do {
                try await body(harness)
            } catch {
                try? await client.shutdown()
                await server.shutdown(drainTimeout: .seconds(2))
                try? await origin.stop()
                throw error
            }
            try await client.shutdown()
            await server.shutdown(drainTimeout: .seconds(2))
            try await origin.stop()
        }
    }

    struct Reply {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: String
        /// The body's bytes as they came (a coded body is no text).
        var bytes = ByteBuffer()

        subscript(header: String) -> String? { headers.first(name: header) }
    }

    func get(
        _ path: String,
        headers: [(String, String)] = [],
        method: HTTPMethod = .GET,
        body: String? = nil
    ) async throws -> Reply {
        try await send(baseURL + path, headers: headers, method: method, body: body)
    }

    func admin(
        _ path: String,
        method: HTTPMethod = .GET,
        headers: [(String, String)] = [],
        body: String? = nil
    ) async throws -> Reply {
        try await send(adminURL + path, headers: headers, method: method, body: body)
    }

    func send(_ url: String, headers: [(String, String)], method: HTTPMethod, body: String?) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await client.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return Reply(status: response.status, headers: response.headers, body: String(buffer: bytes), bytes: bytes)
    }
}

/// A raw TCP connection for tests that need exact bytes on the wire (pipelining, keep-alive, malformed input).
final class RawConnection: Sendable {
    private let channel: any Channel
    private let collector: ByteCollector

    /// `allowHalfClosure`: keep sending after the server has closed its side, as a client still uploading does.
    /// `first`: sent as soon as the connection is up, before the connection is handed back (a client that speaks
    /// at once, whatever the test does next).
    init(port: Int, allowHalfClosure: Bool = false, first: ByteBuffer? = nil) async throws {
        let collector = ByteCollector()
        self.collector = collector
        channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.allowRemoteHalfClosure, value: allowHalfClosure)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(collector)
                    if let first { try channel.pipeline.syncOperations.addHandler(FirstBytes(first)) }
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
    }

    func send(_ text: String) async throws {
        try await channel.writeAndFlush(ByteBuffer(string: text))
    }

    func send(_ bytes: ByteBuffer) async throws {
        try await channel.writeAndFlush(bytes)
    }

    /// Ends what this side sends; the server's side stays open to read from.
    func closeOutput() async throws {
        try await channel.close(mode: .output)
    }

    /// Whether the server has ended what it sends (with half-closure allowed, the connection stays open).
    var serverClosedItsSide: Bool { collector.inputClosed }

    /// Reads one response with a Content-Length body (or none); nil when the server closed the connection first.
    /// `bodyless` is for responses to HEAD.
    func readResponse(
        bodyless: Bool = false,
        timeout: Duration = .seconds(10)
    ) async throws -> (head: String, body: String)? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let parsed = collector.takeResponse(bodyless: bodyless) { return parsed }
            if collector.isClosed { return collector.takeResponse(bodyless: bodyless) }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw CancellationError()
    }

    /// Waits until the server closes the connection; returns whatever arrived that was not read yet.
    func readUntilClosed(timeout: Duration = .seconds(10)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while !collector.isClosed {
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(5))
        }
        return collector.remainder
    }

    var isClosed: Bool { collector.isClosed }

    /// Waits until everything received so far satisfies `condition`, or the server closed the connection;
    /// returns it all, read or not, without taking it: for binary protocols (HTTP/2 frames).
    func received(
        until condition: (ByteBuffer) -> Bool,
        timeout: Duration = .seconds(10)
    ) async throws -> ByteBuffer {
        let deadline = ContinuousClock.now + timeout
        while true {
            let (bytes, closed) = collector.snapshot
            if condition(bytes) || closed { return bytes }
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func close() async {
        try? await channel.close()
    }
}

/// Writes its bytes when the connection becomes active.
private final class FirstBytes: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let bytes: ByteBuffer

    init(_ bytes: ByteBuffer) {
        self.bytes = bytes
    }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
        context.fireChannelActive()
    }
}

private final class ByteCollector: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer

    private let state = NIOLockedValueBox<(buffer: ByteBuffer, closed: Bool, inputClosed: Bool)>(
        (ByteBuffer(), false, false)
    )

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var part = unwrapInboundIn(data)
        _ = state.withLockedValue { $0.buffer.writeBuffer(&part) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.withLockedValue { $0.closed = true }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event { state.withLockedValue { $0.inputClosed = true } }
        context.fireUserInboundEventTriggered(event)
    }

    var isClosed: Bool { state.withLockedValue { $0.closed } }
    var inputClosed: Bool { state.withLockedValue { $0.inputClosed || $0.closed } }
    var remainder: String { state.withLockedValue { String(buffer: $0.buffer) } }
    var snapshot: (bytes: ByteBuffer, closed: Bool) { state.withLockedValue { ($0.buffer, $0.closed) } }

    func takeResponse(bodyless: Bool) -> (head: String, body: String)? {
        state.withLockedValue { state in
            let text = String(buffer: state.buffer)
            guard let headEnd = text.range(of: "\r\n\r\n") else { return nil }
            let head = String(text[..<headEnd.lowerBound])
            var length = 0
            for line in head.split(separator: "\r\n") {
                let parts = line.split(separator: ":", maxSplits: 1)
                if parts.count == 2, parts[0].lowercased() == "content-length" {
                    length = Int(parts[1].trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            let headBytes = head.utf8.count + 4
            let bodyLength = bodyless ? 0 : length
            guard state.buffer.readableBytes >= headBytes + bodyLength else { return nil }
            state.buffer.moveReaderIndex(forwardBy: headBytes)
            let body = state.buffer.readString(length: bodyLength) ?? ""
            state.buffer.discardReadBytes()
            return (head, body)
        }
    }
}
