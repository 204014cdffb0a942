import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// The first handler of a TLS listener's connection: a client whose first byte does not start a TLS handshake
/// record (a plain-HTTP request on the TLS port, most often) gets a plain `400` that says so, and the connection
/// closes, before the TLS handler could answer it with an alert it cannot read. A handshake goes on to the TLS
/// handler, and the gate leaves the pipeline.
final class TLSRecordGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// A TLS record of content type `handshake` (RFC 8446 section 5.1), which every ClientHello is.
    static let handshakeRecordType: UInt8 = 0x16

    static let notTLS = ProxyError(.badRequest, "this port speaks TLS: use https://")

    /// The 400 has been written: what else the client sends is dropped.
    private var refused = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        let bytes = unwrapInboundIn(data)
        guard let first = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self) else { return }
        guard first != Self.handshakeRecordType else {
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        refused = true
        let body = Self.notTLS.jsonBody()
        var answer = context.channel.allocator.buffer(capacity: 160 + body.utf8.count)
        HTTPWireFormat.writeStatusLine(.badRequest, into: &answer)
        answer.writeString(
            "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        )
        // Nothing more is read; the answer goes out, then the connection closes.
        context.writeAndFlush(wrapOutboundOut(answer)).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}
