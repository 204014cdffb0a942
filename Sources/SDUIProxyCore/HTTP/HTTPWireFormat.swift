import NIOCore
import NIOHTTP1

/// HTTP/1.1 response heads as bytes on the wire.
public enum HTTPWireFormat {
    /// `HTTP/1.1 200 OK` and CRLF.
    public static func writeStatusLine(_ status: HTTPResponseStatus, into buffer: inout ByteBuffer) {
        buffer.writeStaticString("HTTP/1.1 ")
        buffer.writeString(String(status.code))
        buffer.writeStaticString(" ")
        buffer.writeString(status.reasonPhrase)
        buffer.writeStaticString("\r\n")
    }

    /// One `name: value` line per header, each ending in CRLF (no blank line).
    public static func writeHeaderLines(_ headers: HTTPHeaders, into buffer: inout ByteBuffer) {
        for (name, value) in headers {
            writeHeaderLine(name, value, into: &buffer)
        }
    }

    @inline(__always)
    public static func writeHeaderLine(_ name: String, _ value: String, into buffer: inout ByteBuffer) {
        buffer.writeString(name)
        buffer.writeStaticString(": ")
        buffer.writeString(value)
        buffer.writeStaticString("\r\n")
    }
}
