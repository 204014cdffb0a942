import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import SDUIProxyCore

/// An origin that reads each request's line, headers and `Content-Length` body itself (NIO's decoder refuses
/// methods it does not know), and answers with the bytes `answer` gives for the request line, closing the
/// connection after them when it says so: for answers NIO's encoder would not write, like a body that ends with
/// the connection. A request that says `Expect: 100-continue` is answered `100 Continue` once its head is in, as a
/// server that wants the body does.
final class RawOrigin: Sendable {
    /// The bytes of an answer, and whether the connection closes after them.
    typealias Answer = @Sendable (_ requestLine: String) -> (bytes: String, close: Bool)

    /// A cacheable component for a GET, 204 for anything else.
    static let componentOrNoContent: Answer = { line in
        let answer =
            line.hasPrefix("GET ")
            ? "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
                + "Content-Length: 26\r\n\r\n{\"_beagleComponent_\":\"ab\"}"
            : "HTTP/1.1 204 No Content\r\n\r\n"
        return (answer, false)
    }

    private let channel: any Channel
    private let isTLS: Bool
    private let recorded = NIOLockedValueBox<[(line: String, body: String)]>([])
    private let heads = NIOLockedValueBox<[String]>([])

    var url: String {
        isTLS ? "https://localhost:\(channel.localAddress!.port!)" : "http://127.0.0.1:\(channel.localAddress!.port!)"
    }
    var requestLines: [String] { recorded.withLockedValue { $0.map(\.line) } }
    var bodies: [String] { recorded.withLockedValue { $0.map(\.body) } }
    /// The request lines of the heads read, each as soon as its head was in, whether its body was or not.
    var headsSeen: [String] { heads.withLockedValue { $0 } }

    private init(channel: any Channel, isTLS: Bool) {
        self.channel = channel
        self.isTLS = isTLS
    }

    /// With `tls`, the origin speaks HTTPS, and its ``url`` is `https://localhost:PORT`.
    static func run(
        answer: @escaping Answer,
        tls: NIOSSLContext? = nil,
        _ body: (RawOrigin) async throws -> Void
    ) async throws {
        let box = NIOLockedValueBox<RawOrigin?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try channel.pipeline.syncOperations.addHandler(
                        Handler(answer: answer) { line, body in
                            box.withLockedValue { $0 }?.recorded.withLockedValue { $0.append((line, body)) }
                        } recordHead: { line in
                            box.withLockedValue { $0 }?.heads.withLockedValue { $0.append(line) }
                        }
                    )
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let origin = RawOrigin(channel: channel, isTLS: tls != nil)
        box.withLockedValue { $0 = origin }
        do {
            try await body(origin)
        } catch {
            try? await channel.close()
            throw error
        }
        try await channel.close()
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        private var buffer = ByteBuffer()
        /// Whether the request whose body is awaited was told to go on.
        private var continued = false
        /// Whether the head of the request whose body is awaited was recorded.
        private var headRecorded = false
        private let answer: Answer
        private let record: @Sendable (String, String) -> Void
        private let recordHead: @Sendable (String) -> Void

        init(
            answer: @escaping Answer,
            record: @escaping @Sendable (String, String) -> Void,
            recordHead: @escaping @Sendable (String) -> Void
        ) {
            self.answer = answer
            self.record = record
            self.recordHead = recordHead
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = unwrapInboundIn(data)
            buffer.writeBuffer(&bytes)
            while let request = nextRequest(context: context) {
                continued = false
                headRecorded = false
                record(request.line, request.body)
                let (bytes, close) = answer(request.line)
                let written = context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: bytes)))
                if close {
                    written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                    return
                }
            }
        }

        /// The next whole request in the buffer: its method and target, and its body.
        private func nextRequest(context: ChannelHandlerContext) -> (line: String, body: String)? {
            let text = String(buffer: buffer)
            guard let headEnd = text.range(of: "\r\n\r\n") else { return nil }
            let headLines = text[..<headEnd.lowerBound].components(separatedBy: "\r\n")
            let length =
                headLines.dropFirst().first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            let headBytes = text[..<headEnd.upperBound].utf8.count
            let requestLine = headLines[0].split(separator: " ").prefix(2).joined(separator: " ")
            if !headRecorded {
                headRecorded = true
                recordHead(requestLine)
            }
            guard buffer.readableBytes >= headBytes + length else {
                let expects = headLines.dropFirst().contains { $0.lowercased() == "expect: 100-continue" }
                if expects, !continued {
                    continued = true
                    context.writeAndFlush(
                        wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 100 Continue\r\n\r\n")),
                        promise: nil
                    )
                }
                return nil
            }
            buffer.moveReaderIndex(forwardBy: headBytes)
            let body = buffer.readString(length: length) ?? ""
            buffer.discardReadBytes()
            let parts = headLines[0].split(separator: " ")
            return ("\(parts[0]) \(parts[1])", body)
        }
    }
}

extension ProxyHarness {
    /// Runs `body` with a proxy in front of a ``RawOrigin`` that answers with `answer`.
    static func run(
        behind answer: @escaping RawOrigin.Answer,
        tls: NIOSSLContext? = nil,
        configure: @escaping @Sendable (inout ProxyConfiguration) -> Void = { _ in },
        _ body: (ProxyHarness, RawOrigin) async throws -> Void
    ) async throws {
        try await RawOrigin.run(answer: answer, tls: tls) { origin in
            let setUp: @Sendable (inout ProxyConfiguration) -> Void = { configuration in
                configuration.upstream.url = origin.url
                configure(&configuration)
            }
            try await ProxyHarness.run(configure: setUp) { proxy async throws in
                try await body(proxy, origin)
            }
        }
    }
}
