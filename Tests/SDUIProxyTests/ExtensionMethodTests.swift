import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Methods beyond the ones NIO names (RFC 9110 section 9.1, RFC 9111 section 4.4), against a real origin over
/// loopback. NIO's own decoder refuses methods it does not know, so the origin here reads request lines itself.
@Suite("RFC 9110 §9.1: extension methods")
struct ExtensionMethodTests {
    @Test("RFC 9110 §9.1: a method the proxy has never heard of is forwarded exactly as received, body and all")
    func forwardedAsReceived() async throws {
        try await RawOrigin.run { origin in
            try await ProxyHarness.run(configure: { $0.upstream.url = origin.url }) { proxy async throws in
                for method in ["BREW", "M-SEARCH", "get", "PROPFIND"] {
                    let reply = try await proxy.get("/pot", method: HTTPMethod(rawValue: method), body: "hi")
                    #expect(reply.status == .noContent, "\(method)")
                    #expect(reply["Cache-Status"] == nil, "\(method): not on the cache path")
                }
                #expect(origin.requestLines == ["BREW /pot", "M-SEARCH /pot", "get /pot", "PROPFIND /pot"])
                #expect(origin.bodies == ["hi", "hi", "hi", "hi"])
            }
        }
    }

    @Test("RFC 9111 §4.4: a 2xx to any unsafe method invalidates its target; OPTIONS and TRACE do not")
    func invalidation() async throws {
        try await RawOrigin.run { origin in
            try await ProxyHarness.run(configure: { $0.upstream.url = origin.url }) { proxy async throws in
                for (method, invalidates) in [("OPTIONS", false), ("TRACE", false), ("BREW", true), ("PURGE", true)] {
                    _ = try await proxy.get("/screens/a")
                    #expect(try await proxy.get("/screens/a")["X-Cache"] == "HIT")
                    _ = try await proxy.get("/screens/a", method: HTTPMethod(rawValue: method))
                    let after = try await proxy.get("/screens/a")["X-Cache"]
                    #expect(after == (invalidates ? "MISS" : "HIT"), "\(method)")
                }
            }
        }
    }

    @Test(
        "CONNECT is still refused: this is not a forward proxy",
        arguments: [("example.com:443", "400"), ("/tunnel", "405")]
    )
    func connectRefused(target: String, status: String) async throws {
        try await ProxyHarness.run { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("CONNECT \(target) HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            let reply = try #require(try await connection.readResponse())
            #expect(reply.head.hasPrefix("HTTP/1.1 \(status)"), "\(reply.head)")
            #expect(proxy.origin.requestCount == 0)
            await connection.close()
        }
    }
}

/// An origin that reads each request's line, headers and `Content-Length` body itself, and answers a GET with
/// a cacheable component and anything else with 204.
private final class RawOrigin: Sendable {
    private let channel: any Channel
    private let recorded = NIOLockedValueBox<[(line: String, body: String)]>([])

    var url: String { "http://127.0.0.1:\(channel.localAddress!.port!)" }
    var requestLines: [String] { recorded.withLockedValue { $0.map(\.line) } }
    var bodies: [String] { recorded.withLockedValue { $0.map(\.body) } }

    private init(channel: any Channel) {
        self.channel = channel
    }

    static func run(_ body: (RawOrigin) async throws -> Void) async throws {
        let box = NIOLockedValueBox<RawOrigin?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        Handler(record: { line, body in
                            box.withLockedValue { $0 }?.recorded.withLockedValue { $0.append((line, body)) }
                        })
                    )
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let origin = RawOrigin(channel: channel)
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
        private let record: @Sendable (String, String) -> Void

        init(record: @escaping @Sendable (String, String) -> Void) {
            self.record = record
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = unwrapInboundIn(data)
            buffer.writeBuffer(&bytes)
            while let request = nextRequest() {
                record(request.line, request.body)
                let answer =
                    request.line.hasPrefix("GET ")
                    ? "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
                        + "Content-Length: 26\r\n\r\n{\"_beagleComponent_\":\"ab\"}"
                    : "HTTP/1.1 204 No Content\r\n\r\n"
                context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: answer)), promise: nil)
            }
        }

        /// The next whole request in the buffer: its method and target, and its body.
        private func nextRequest() -> (line: String, body: String)? {
            let text = String(buffer: buffer)
            guard let headEnd = text.range(of: "\r\n\r\n") else { return nil }
            let headLines = text[..<headEnd.lowerBound].components(separatedBy: "\r\n")
            let length =
                headLines.dropFirst().first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            let headBytes = text[..<headEnd.upperBound].utf8.count
            guard buffer.readableBytes >= headBytes + length else { return nil }
            buffer.moveReaderIndex(forwardBy: headBytes)
            let body = buffer.readString(length: length) ?? ""
            buffer.discardReadBytes()
            let parts = headLines[0].split(separator: " ")
            return ("\(parts[0]) \(parts[1])", body)
        }
    }
}
