import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// What the public listener's handler writes: response heads and bodies to encode, or bytes already encoded
/// (cache hits, whose status line and headers were encoded once when the entry was stored).
enum ResponsePart {
    /// How a response's body is delimited.
    enum Framing {
        /// The head carries `Content-Length`; body parts go out as they are.
        case contentLength
        /// Body parts are sent as chunks; the encoder adds `Transfer-Encoding: chunked` to the head.
        case chunked
        /// No body follows (HEAD, 204, 304).
        case none
    }

    case head(HTTPResponseHead, Framing)
    case body(ByteBuffer)
    case end
    /// Bytes of a complete response, written as they are.
    case encoded(ByteBuffer)
}

/// Encodes ``ResponsePart``s to HTTP/1.1 bytes.
///
/// NIO's `HTTPResponseEncoder` encodes every head anew; this encoder also passes pre-encoded bytes through, so
/// a cache hit costs a few buffer writes and no header encoding.
final class ResponseEncoder: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ResponsePart
    typealias OutboundOut = ByteBuffer

    private var chunked = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .encoded(let bytes):
            context.write(wrapOutboundOut(bytes), promise: promise)
        case .head(let head, let framing):
            chunked = framing == .chunked
            var buffer = context.channel.allocator.buffer(capacity: 256)
            Self.encode(head, chunked: chunked, into: &buffer)
            context.write(wrapOutboundOut(buffer), promise: promise)
        case .body(let body):
            guard chunked else {
                context.write(wrapOutboundOut(body), promise: promise)
                return
            }
            guard body.readableBytes > 0 else {
                promise?.succeed(())
                return
            }
            var prefix = context.channel.allocator.buffer(capacity: 12)
            prefix.writeString(String(body.readableBytes, radix: 16))
            prefix.writeStaticString("\r\n")
            context.write(wrapOutboundOut(prefix), promise: nil)
            context.write(wrapOutboundOut(body), promise: nil)
            context.write(wrapOutboundOut(Self.crlf), promise: promise)
        case .end:
            if chunked {
                chunked = false
                context.write(wrapOutboundOut(Self.lastChunk), promise: promise)
            } else {
                promise?.succeed(())
            }
        }
    }

    private static let crlf = ByteBuffer(staticString: "\r\n")
    private static let lastChunk = ByteBuffer(staticString: "0\r\n\r\n")

    /// The status line and header lines of `head`, ending with the blank line.
    static func encode(_ head: HTTPResponseHead, chunked: Bool, into buffer: inout ByteBuffer) {
        HTTPWireFormat.writeStatusLine(head.status, into: &buffer)
        HTTPWireFormat.writeHeaderLines(head.headers, into: &buffer)
        if chunked { buffer.writeStaticString("Transfer-Encoding: chunked\r\n") }
        buffer.writeStaticString("\r\n")
    }
}
