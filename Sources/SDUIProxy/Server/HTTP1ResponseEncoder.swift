import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// How the proxy turns the responses it writes into HTTP/1.1 bytes. The public listener has no encoding
/// handler: every writer encodes its own response and writes bytes, so a response passes through no channel
/// handler on its way out.
enum ResponseEncoding {
    /// How a response's body is delimited.
    enum Framing {
        /// The head carries `Content-Length`; body parts go out as they are.
        case contentLength
        /// Body parts are sent as chunks; the head gets `Transfer-Encoding: chunked`.
        case chunked
        /// No body follows (HEAD, 1xx, 204, 304).
        case none
    }

    /// Appends the status line and header lines of `head`, and the blank line that ends them.
    static func writeHead(_ head: HTTPResponseHead, framing: Framing, into buffer: inout ByteBuffer) {
        HTTPWireFormat.writeStatusLine(head.status, into: &buffer)
        HTTPWireFormat.writeHeaderLines(head.headers, into: &buffer)
        if framing == .chunked { buffer.writeStaticString("Transfer-Encoding: chunked\r\n") }
        buffer.writeStaticString("\r\n")
    }

    /// The size line that goes before a chunk of `count` bytes.
    static func chunkPrefix(count: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
        var prefix = allocator.buffer(capacity: 18)
        prefix.writeString(String(count, radix: 16))
        prefix.writeStaticString("\r\n")
        return prefix
    }

    static let chunkSuffix = ByteBuffer(staticString: "\r\n")
    static let lastChunk = ByteBuffer(staticString: "0\r\n\r\n")
}
