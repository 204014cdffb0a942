import NIOCore
import NIOHPACK

/// HTTP/2 frames written and read byte by byte (RFC 9113 section 4), for the tests that play a client no library
/// would be: one that floods CONTINUATION frames, resets every stream it opens, or holds its flow-control window
/// shut. Header blocks are HPACK literals without Huffman coding or indexing (RFC 7541 section 6.2.2), which any
/// decoder reads.
enum HTTP2Wire {
    static let preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    enum FrameType: UInt8 {
        case data = 0x0
        case headers = 0x1
        case rstStream = 0x3
        case settings = 0x4
        case ping = 0x6
        case goAway = 0x7
        case windowUpdate = 0x8
        case continuation = 0x9
    }

    static let endStream: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4
    static let ack: UInt8 = 0x1

    /// Error codes (RFC 9113 section 7).
    static let noError: UInt32 = 0x0
    static let protocolError: UInt32 = 0x1
    static let frameSizeError: UInt32 = 0x6
    static let refusedStream: UInt32 = 0x7
    static let cancel: UInt32 = 0x8
    static let enhanceYourCalm: UInt32 = 0xb

    struct Frame {
        var type: UInt8
        var flags: UInt8
        var stream: UInt32
        var payload: ByteBuffer

        /// A GOAWAY's or RST_STREAM's error code.
        var errorCode: UInt32? {
            switch type {
            case FrameType.goAway.rawValue: payload.getInteger(at: payload.readerIndex + 4, as: UInt32.self)
            case FrameType.rstStream.rawValue: payload.getInteger(at: payload.readerIndex, as: UInt32.self)
            default: nil
            }
        }
    }

    static func frame(
        _ type: FrameType,
        flags: UInt8 = 0,
        stream: UInt32,
        payload: ByteBuffer = ByteBuffer()
    ) -> ByteBuffer {
        var bytes = ByteBuffer()
        let length = payload.readableBytes
        bytes.writeInteger(UInt8(truncatingIfNeeded: length >> 16))
        bytes.writeInteger(UInt16(truncatingIfNeeded: length))
        bytes.writeInteger(type.rawValue)
        bytes.writeInteger(flags)
        bytes.writeInteger(stream & 0x7fff_ffff)
        var payload = payload
        bytes.writeBuffer(&payload)
        return bytes
    }

    /// The preface and an empty SETTINGS frame, or one with `settings` (identifier, value).
    static func connectionStart(settings: [(UInt16, UInt32)] = []) -> ByteBuffer {
        var bytes = ByteBuffer(string: preface)
        var payload = ByteBuffer()
        for (identifier, value) in settings {
            payload.writeInteger(identifier)
            payload.writeInteger(value)
        }
        var settingsFrame = frame(.settings, stream: 0, payload: payload)
        bytes.writeBuffer(&settingsFrame)
        return bytes
    }

    /// A request's header block: `:method`, `:scheme` http, `:path`, `:authority`, then `fields`.
    static func requestBlock(method: String = "GET", path: String, fields: [(String, String)] = []) -> ByteBuffer {
        var block = ByteBuffer()
        // Literal without indexing, name from the static table: :authority 1, :method 2, :path 4, :scheme 6.
        literal(nameIndex: 2, value: method, into: &block)
        literal(nameIndex: 6, value: "http", into: &block)
        literal(nameIndex: 4, value: path, into: &block)
        literal(nameIndex: 1, value: "localhost", into: &block)
        for (name, value) in fields {
            block.writeInteger(UInt8(0))
            writeString(name, into: &block)
            writeString(value, into: &block)
        }
        return block
    }

    private static func literal(nameIndex: UInt8, value: String, into block: inout ByteBuffer) {
        block.writeInteger(nameIndex)  // 0000 xxxx: literal without indexing, indexed name (index < 15)
        writeString(value, into: &block)
    }

    /// A string literal, its length as an HPACK integer with a 7-bit prefix, no Huffman coding.
    private static func writeString(_ text: String, into block: inout ByteBuffer) {
        var length = text.utf8.count
        if length < 127 {
            block.writeInteger(UInt8(length))
        } else {
            block.writeInteger(UInt8(127))
            length -= 127
            while length >= 128 {
                block.writeInteger(UInt8(length & 0x7f | 0x80))
                length >>= 7
            }
            block.writeInteger(UInt8(length))
        }
        block.writeString(text)
    }

    /// A request's HEADERS frame on `stream`, its block ``requestBlock(method:path:fields:)``; END_HEADERS always,
    /// END_STREAM when `endStream`.
    static func request(
        stream: UInt32,
        method: String = "GET",
        path: String,
        fields: [(String, String)] = [],
        endStream: Bool = true
    ) -> ByteBuffer {
        frame(
            .headers,
            flags: endHeaders | (endStream ? Self.endStream : 0),
            stream: stream,
            payload: requestBlock(method: method, path: path, fields: fields)
        )
    }

    static func rstStream(_ stream: UInt32, code: UInt32 = cancel) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(code)
        return frame(.rstStream, stream: stream, payload: payload)
    }

    static func windowUpdate(_ stream: UInt32, increment: UInt32) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(increment)
        return frame(.windowUpdate, stream: stream, payload: payload)
    }

    static func ping(_ data: UInt64) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(data)
        return frame(.ping, stream: 0, payload: payload)
    }

    /// The whole frames in `bytes`, in order; a partial frame at the end is left out.
    static func frames(in bytes: ByteBuffer) -> [Frame] {
        var bytes = bytes
        var frames: [Frame] = []
        while bytes.readableBytes >= 9 {
            let start = bytes.readerIndex
            let high = Int(bytes.getInteger(at: start, as: UInt8.self)!)
            let low = Int(bytes.getInteger(at: start + 1, as: UInt16.self)!)
            let length = high << 16 | low
            guard bytes.readableBytes >= 9 + length else { break }
            let type = bytes.getInteger(at: start + 3, as: UInt8.self)!
            let flags = bytes.getInteger(at: start + 4, as: UInt8.self)!
            let stream = bytes.getInteger(at: start + 5, as: UInt32.self)! & 0x7fff_ffff
            let payload = bytes.getSlice(at: start + 9, length: length)!
            frames.append(Frame(type: type, flags: flags, stream: stream, payload: payload))
            bytes.moveReaderIndex(forwardBy: 9 + length)
        }
        return frames
    }

    /// The header blocks of the HEADERS frames among `frames`, in order, decoded as a client decodes them (one
    /// decoder, whose dynamic table the blocks fill in turn), with their streams.
    static func headerBlocks(in frames: [Frame]) throws -> [(stream: UInt32, headers: HPACKHeaders)] {
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        return try frames.filter { $0.type == FrameType.headers.rawValue }.map { frame in
            var block = frame.payload
            // Flags: PADDED (0x8) and PRIORITY (0x20) put bytes before the block; the proxy sends neither.
            return (frame.stream, try decoder.decodeHeaders(from: &block))
        }
    }
}

extension RawConnection {
    /// Opens HTTP/2 by prior knowledge on this new connection, asks for `path` on stream 1, and waits until that
    /// stream has ended (or the server closed the connection); returns every byte received, frames to read with
    /// ``HTTP2Wire/frames(in:)``.
    func http2Get(_ path: String) async throws -> ByteBuffer {
        var bytes = HTTP2Wire.connectionStart()
        var headers = HTTP2Wire.request(stream: 1, path: path)
        bytes.writeBuffer(&headers)
        try await send(bytes)
        return try await received { bytes in
            HTTP2Wire.frames(in: bytes).contains { $0.stream == 1 && $0.flags & HTTP2Wire.endStream != 0 }
        }
    }
}
