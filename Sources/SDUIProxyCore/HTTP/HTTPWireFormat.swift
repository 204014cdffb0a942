import NIOCore
import NIOHTTP1

/// HTTP/1.1 response heads as bytes on the wire.
public enum HTTPWireFormat {
    /// `HTTP/1.1 200 OK` and CRLF, in one write: five writes (and a string for the code) cost every forwarded
    /// response about a thousand instructions of capacity and uniqueness checks.
    public static func writeStatusLine(_ status: HTTPResponseStatus, into buffer: inout ByteBuffer) {
        let code = Int64(status.code)
        status.reasonPhrase.withContiguousUTF8 { reason in
            _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 12 + maximumDecimalDigits + reason.count) {
                out in
                var count = copy("HTTP/1.1 ", to: out, at: 0)
                count = writeDecimal(code, to: out, at: count)
                out[count] = UInt8(ascii: " ")
                UnsafeMutableRawBufferPointer(rebasing: out[(count + 1)..<(count + 1 + reason.count)]).copyMemory(
                    from: UnsafeRawBufferPointer(reason)
                )
                return copy("\r\n", to: out, at: count + 1 + reason.count)
            }
        }
    }

    /// One `name: value` line per header, each ending in CRLF (no blank line).
    public static func writeHeaderLines(_ headers: HTTPHeaders, into buffer: inout ByteBuffer) {
        for (name, value) in headers {
            writeHeaderLine(name, value, into: &buffer)
        }
    }

    /// `name: value` and CRLF, copied in one write: four writes cost four capacity and uniqueness checks, and a
    /// miss writes a few dozen lines.
    @inline(__always)
    public static func writeHeaderLine(_ name: String, _ value: String, into buffer: inout ByteBuffer) {
        name.withContiguousUTF8 { name in
            value.withContiguousUTF8 { value in
                writeHeaderLine(UnsafeRawBufferPointer(name), UnsafeRawBufferPointer(value), into: &buffer)
            }
        }
    }

    /// ``writeHeaderLine(_:_:into:)`` for a name and value read in place (a backend's field lines).
    @inline(__always)
    public static func writeHeaderLine(
        _ name: UnsafeRawBufferPointer,
        _ value: UnsafeRawBufferPointer,
        into buffer: inout ByteBuffer
    ) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: name.count + value.count + 4) { out in
            copyLine(name, value, to: out, at: 0)
        }
    }
}

extension HTTPWireFormat {
    /// How a request's body is delimited on this hop: the encoder writes the one framing field itself.
    public enum RequestFraming: Sendable, Equatable {
        /// No body, and no framing field.
        case none
        /// `Content-Length`.
        case length(Int)
        /// `Transfer-Encoding: chunked`, for a body streamed without a known length, after the head, by its caller.
        case chunked
    }

    /// A request head (and its body, when there is one) as bytes, for the proxy's own backend connections.
    ///
    /// Every part is checked before it is written, and nothing is returned after a failed check: a target or
    /// header that could end a line early would let one request smuggle another onto a shared backend
    /// connection, so it is an error instead.
    ///
    /// - Parameters:
    ///   - host: when given, sent as the `Host` header, first, in place of any `Host` in `fields`.
    ///   - fields: written in their order, as they lie; any `Content-Length` or `Transfer-Encoding` among them is
    ///     left out, since the framing is this hop's: `framing` says what is written instead.
    public static func encodeRequest(
        method: HTTPMethod,
        target: String,
        host: String? = nil,
        fields: HTTPFieldLines,
        framing: RequestFraming = .none,
        body: ByteBuffer?
    ) throws(ProxyError) -> ByteBuffer {
        guard !target.isEmpty, target.withContiguousUTF8({ $0.allSatisfy { $0 > 0x20 && $0 < 0x7F } }) else {
            throw ProxyError(.url, "the upstream request target has characters HTTP does not allow")
        }
        if let host {
            guard !host.isEmpty, HTTPSyntax.isFieldValue(host) else {
                throw ProxyError(.url, "the upstream's host has characters HTTP does not allow")
            }
        }
        let method = method.rawValue
        guard HTTPSyntax.isToken(method) else {
            throw ProxyError(.badRequest, "the upstream request's method is not a token")
        }
        // A body the backend could not tell the end of would be read as the start of the next request on the
        // connection.
        switch framing {
        case .none where body != nil, .length(..<0):
            throw ProxyError(.internalError, "an upstream request body without a framing of its own")
        case .chunked where body != nil:
            // Chunks are written by whoever streams the body; a body given here goes out as it is.
            throw ProxyError(.internalError, "an upstream request body given whole but framed as chunks")
        case .length(let count) where count != (body?.readableBytes ?? count):
            throw ProxyError(.internalError, "an upstream request body whose length is not the one framed")
        default: break
        }
        // An upper bound of the head's size, known without a walk of the fields (their bytes are counted as they
        // are added), so that the buffer is allocated once and the head written in one go.
        var headBytes = method.utf8.count + 1 + target.utf8.count + 11 + fields.byteCount + 4 * fields.count + 2
        if let host { headBytes += 6 + host.utf8.count + 2 }
        switch framing {
        case .none: break
        case .length: headBytes += 16 + maximumDecimalDigits + 2
        case .chunked: headBytes += 28
        }
        var buffer = ByteBufferAllocator().buffer(capacity: headBytes + (body?.readableBytes ?? 0))
        // Fields are checked as they are copied, from the same bytes, but for the first `wireCheckedCount`, checked
        // on these bytes already; the first that HTTP does not allow ends the write with nothing written.
        var refused: String?
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: headBytes) { out in
            var offset = method.withContiguousUTF8 { method in
                target.withContiguousUTF8 { target in
                    var offset = copy(UnsafeRawBufferPointer(method), to: out, at: 0)
                    out[offset] = UInt8(ascii: " ")
                    offset = copy(UnsafeRawBufferPointer(target), to: out, at: offset + 1)
                    return copy(" HTTP/1.1\r\n", to: out, at: offset)
                }
            }
            if let host {
                let name: StaticString = "Host"
                offset = host.withContiguousUTF8 { host in
                    copyLine(name.rawBytes, UnsafeRawBufferPointer(host), to: out, at: offset)
                }
            }
            // The first fields may have been checked already, when they were kept to be sent again.
            let checked = fields.wireCheckedCount
            var index = 0
            fields.forEachField { name, value in
                defer { index &+= 1 }
                guard refused == nil, !isSetByEncoder(name, replacingHost: host != nil) else { return }
                guard index < checked || isWireField(name: name, value: value) else {
                    refused = String(decoding: name, as: UTF8.self)
                    return
                }
                offset = copyLine(name, value, to: out, at: offset)
            }
            guard refused == nil else { return 0 }
            switch framing {
            case .none: break
            case .length(let count):
                offset = copy("Content-Length: ", to: out, at: offset)
                offset = writeDecimal(Int64(count), to: out, at: offset)
                offset = copy("\r\n", to: out, at: offset)
            case .chunked:
                offset = copy("Transfer-Encoding: chunked\r\n", to: out, at: offset)
            }
            return copy("\r\n", to: out, at: offset)
        }
        if let refused {
            throw ProxyError(.badRequest, "a header HTTP does not allow in the upstream request: \(refused)")
        }
        if let body { buffer.writeImmutableBuffer(body) }
        return buffer
    }

    /// Whether `name: value` may be written as a request's field line: a token for a name, and a value without
    /// control characters (nothing that could end the line early).
    @inline(__always)
    static func isWireField(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool {
        !name.isEmpty && HTTPSyntax.isToken(bytes: name) && HTTPSyntax.isFieldValue(bytes: value)
    }

    /// Whether the field `name` is one the encoder writes itself: the framing, and `Host` when it is given.
    @inline(__always)
    private static func isSetByEncoder(_ name: UnsafeRawBufferPointer, replacingHost: Bool) -> Bool {
        // Told apart by length first: most names are none of the three.
        switch name.count {
        case 4: replacingHost && HTTPSyntax.sameLengthEqualsIgnoringCase(name, "host")
        case 14: HTTPSyntax.sameLengthEqualsIgnoringCase(name, "content-length")
        case 17: HTTPSyntax.sameLengthEqualsIgnoringCase(name, "transfer-encoding")
        default: false
        }
    }
}

extension HTTPWireFormat {
    /// The most bytes ``writeDecimal(_:to:at:)`` writes: a sign and 19 digits.
    public static let maximumDecimalDigits = 20

    /// Writes `value` in decimal at `offset` of `out`, which has room for ``maximumDecimalDigits``; returns the
    /// offset after it. No `String` in between, for the lines a hit writes.
    @inline(__always)
    public static func writeDecimal(_ value: Int64, to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        var offset = offset
        if value < 0 {
            out[offset] = UInt8(ascii: "-")
            offset += 1
        }
        var magnitude = value.magnitude
        var digits = 0
        var rest = magnitude
        repeat {
            digits += 1
            rest /= 10
        } while rest > 0
        let end = offset + digits
        for index in stride(from: end - 1, through: offset, by: -1) {
            out[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
        }
        return end
    }

    /// Copies the line `name: value` and CRLF to `out` at `offset`, which has room for it; returns the offset after
    /// it.
    @inline(__always)
    public static func copyLine(
        _ name: UnsafeRawBufferPointer,
        _ value: UnsafeRawBufferPointer,
        to out: UnsafeMutableRawBufferPointer,
        at offset: Int
    ) -> Int {
        let nameEnd = offset + name.count
        let valueEnd = nameEnd + 2 + value.count
        UnsafeMutableRawBufferPointer(rebasing: out[offset..<nameEnd]).copyMemory(from: name)
        out[nameEnd] = UInt8(ascii: ":")
        out[nameEnd + 1] = UInt8(ascii: " ")
        UnsafeMutableRawBufferPointer(rebasing: out[(nameEnd + 2)..<valueEnd]).copyMemory(from: value)
        out[valueEnd] = UInt8(ascii: "\r")
        out[valueEnd + 1] = UInt8(ascii: "\n")
        return valueEnd + 2
    }

    /// Copies `bytes` to `out` at `offset`, which has room for them; returns the offset after them.
    @inline(__always)
    public static func copy(
        _ bytes: UnsafeRawBufferPointer,
        to out: UnsafeMutableRawBufferPointer,
        at offset: Int
    ) -> Int {
        UnsafeMutableRawBufferPointer(rebasing: out[offset..<(offset + bytes.count)]).copyMemory(from: bytes)
        return offset + bytes.count
    }

    /// Copies `text` to `out` at `offset`; returns the offset after it.
    @inline(__always)
    public static func copy(_ text: StaticString, to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        let count = text.utf8CodeUnitCount
        UnsafeMutableRawBufferPointer(rebasing: out[offset..<(offset + count)]).copyMemory(from: text.rawBytes)
        return offset + count
    }
}
