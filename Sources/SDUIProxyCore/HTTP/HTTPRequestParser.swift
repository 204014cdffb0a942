import NIOCore
import NIOHTTP1

/// A strict HTTP/1.1 request parser (RFC 9112) for the public listener: bytes in, request heads, body parts
/// and ends out, one at a time, with any number of pipelined requests in one buffer.
///
/// It is written for the cache-hit path: a request head is found with one scan for the blank line and parsed
/// in place, and a request without a body costs no state beyond that. Anything two parsers could read
/// differently is a ``Failure`` (the connection is then answered 400 and closed): a header folded over lines,
/// whitespace before a colon, control characters, bare line feeds, a `Content-Length` that is not one
/// decimal number, `Content-Length` together with `Transfer-Encoding`, a transfer coding other than a final
/// `chunked`, a malformed chunk. Sizes are bounded: a head longer than `maximumHeadBytes` is a 431 before it
/// is parsed, and chunk-size and trailer lines have limits of their own.
public struct HTTPRequestParser: Sendable {
    /// Why the bytes on a connection are not a request this parser accepts.
    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible {
        /// `badRequest`, `headersTooLarge` or `uriTooLong`.
        public var kind: ProxyError.Kind
        public var reason: String

        public var description: String { reason }

        public var proxyError: ProxyError {
            ProxyError(kind, kind == .badRequest ? "malformed HTTP request: \(reason)" : reason)
        }
    }

    /// The longest chunk-size line (size, extensions and CRLF) accepted.
    public static let maximumChunkLineBytes = 1024

    private enum State {
        /// Before a request head: scanning for the blank line that ends it; `scanned` bytes have no CRLFCRLF.
        case head(scanned: Int)
        /// In a body of known length.
        case body(remaining: Int)
        /// Before a chunk-size line.
        case chunkSize
        /// In a chunk's data.
        case chunkData(remaining: Int)
        /// After a chunk's data: its CRLF.
        case chunkEnd
        /// In the trailer section after the last chunk; `bytes` counted so far against the head limit.
        case trailers(bytes: Int)
        /// The request is complete; its end is the next part.
        case end
    }

    private var state = State.head(scanned: 0)
    /// The longest request head (request line, header lines and the blank line) accepted.
    public let maximumHeadBytes: Int

    public init(maximumHeadBytes: Int) {
        self.maximumHeadBytes = maximumHeadBytes
    }

    /// Whether the parser is between requests (nothing of a next request has been consumed).
    public var isBetweenRequests: Bool {
        if case .head(let scanned) = state { return scanned == 0 }
        return false
    }

    /// The next part of a request from `buffer`, consuming its bytes; nil when `buffer` holds no complete part.
    public mutating func next(from buffer: inout ByteBuffer) throws(Failure) -> HTTPServerRequestPart? {
        switch state {
        case .head(let scanned):
            return try nextHead(from: &buffer, scanned: scanned)
        case .body(let remaining):
            guard let (part, left) = Self.readBody(upTo: remaining, from: &buffer) else { return nil }
            state = left == 0 ? .end : .body(remaining: left)
            return .body(part)
        case .chunkSize:
            return try nextChunkSize(from: &buffer)
        case .chunkData(let remaining):
            guard let (part, left) = Self.readBody(upTo: remaining, from: &buffer) else { return nil }
            state = left == 0 ? .chunkEnd : .chunkData(remaining: left)
            return .body(part)
        case .chunkEnd:
            guard buffer.readableBytes >= 2 else { return nil }
            guard buffer.readInteger(as: UInt16.self) == Self.crlf else {
                throw Failure(kind: .badRequest, reason: "a chunk's data is not followed by CRLF")
            }
            state = .chunkSize
            return try nextChunkSize(from: &buffer)
        case .trailers(let bytes):
            return try nextTrailers(from: &buffer, counted: bytes)
        case .end:
            state = .head(scanned: 0)
            return .end(nil)
        }
    }

    /// Checks what is left when the client has closed its side: only a connection between requests may end.
    public func finish() throws(Failure) {
        guard isBetweenRequests else {
            throw Failure(kind: .badRequest, reason: "the connection ended inside a request")
        }
    }

    private static let crlf = UInt16(0x0D0A)

    /// As much of the `remaining` body bytes as `buffer` holds (without copying), and how many are left after
    /// them; nil when it holds none.
    private static func readBody(upTo remaining: Int, from buffer: inout ByteBuffer) -> (ByteBuffer, left: Int)? {
        guard let part = buffer.readSlice(length: min(remaining, buffer.readableBytes)), part.readableBytes > 0
        else { return nil }
        return (part, remaining - part.readableBytes)
    }

    // MARK: Heads

    private mutating func nextHead(
        from buffer: inout ByteBuffer,
        scanned: Int
    ) throws(Failure) -> HTTPServerRequestPart? {
        let readable = buffer.readableBytes
        // The blank line that ends the head; the scan resumes where it stopped (minus a partial CRLFCRLF).
        let found: Int? = buffer.withUnsafeReadableBytes { bytes in
            var index = max(0, scanned - 3)
            while index + 3 < bytes.count {
                if bytes[index + 3] != 0x0A {
                    index += bytes[index + 3] == 0x0D ? 1 : 4
                    continue
                }
                if bytes[index] == 0x0D, bytes[index + 1] == 0x0A, bytes[index + 2] == 0x0D { return index }
                index += 1
            }
            return nil
        }
        guard let end = found else {
            guard readable <= maximumHeadBytes else { throw Self.headTooLarge(maximumHeadBytes) }
            state = .head(scanned: readable)
            return nil
        }
        guard end + 4 <= maximumHeadBytes else { throw Self.headTooLarge(maximumHeadBytes) }
        let parsed = try buffer.withUnsafeReadableBytes { bytes throws(Failure) in
            try Self.parseHead(UnsafeRawBufferPointer(rebasing: bytes[0..<end]))
        }
        buffer.moveReaderIndex(forwardBy: end + 4)
        state = parsed.framing
        return .head(parsed.head)
    }

    private static func headTooLarge(_ limit: Int) -> Failure {
        Failure(kind: .headersTooLarge, reason: "the request head exceeds \(limit) bytes")
    }

    /// Parses a head without its final CRLFCRLF.
    private static func parseHead(
        _ bytes: UnsafeRawBufferPointer
    ) throws(Failure) -> (head: HTTPRequestHead, framing: State) {
        var lines = LineReader(bytes: bytes)
        guard let requestLine = lines.next() else { throw bad("an empty request line") }
        let (method, uri, version) = try parseRequestLine(UnsafeRawBufferPointer(rebasing: bytes[requestLine]))

        var headers = HTTPHeaders()
        var contentLength: Int?
        var codings: [String] = []
        while let line = lines.next() {
            let (name, value, padded) = try parseField(UnsafeRawBufferPointer(rebasing: bytes[line]))
            // The framing fields are held to llhttp's strictness: whitespace after them is refused.
            let isLength = HTTPSyntax.equalsIgnoringCase(name, "content-length")
            let isCoding = !isLength && HTTPSyntax.equalsIgnoringCase(name, "transfer-encoding")
            if isLength || isCoding, padded { throw bad("whitespace after the value of \(name)") }
            if isLength {
                guard let length = parseContentLength(value) else { throw bad("an invalid Content-Length") }
                guard contentLength == nil || contentLength == length else {
                    throw bad("conflicting Content-Length values")
                }
                contentLength = length
            } else if isCoding {
                for coding in value.split(separator: ",", omittingEmptySubsequences: false) {
                    let coding = coding.trimmingWhitespace()
                    guard !coding.isEmpty else { throw bad("an empty element in Transfer-Encoding") }
                    codings.append(coding)
                }
            }
            headers.add(name: name, value: value)
        }
        guard lines.isValid else { throw bad("a bare line feed in the head") }

        let framing: State
        if !codings.isEmpty {
            guard contentLength == nil else { throw bad("both Content-Length and Transfer-Encoding") }
            guard let last = codings.last, HTTPSyntax.equalsIgnoringCase(last, "chunked") else {
                throw bad("a Transfer-Encoding that does not end in chunked")
            }
            framing = .chunkSize
        } else if let contentLength, contentLength > 0 {
            framing = .body(remaining: contentLength)
        } else {
            framing = .end
        }
        return (HTTPRequestHead(version: version, method: method, uri: uri, headers: headers), framing)
    }

    private static func parseRequestLine(
        _ line: UnsafeRawBufferPointer
    ) throws(Failure) -> (HTTPMethod, String, HTTPVersion) {
        guard let firstSpace = line.firstIndex(of: UInt8(ascii: " ")), firstSpace > 0 else {
            throw bad("a malformed request line")
        }
        let methodBytes = UnsafeRawBufferPointer(rebasing: line[..<firstSpace])
        guard methodBytes.allSatisfy(HTTPSyntax.isTokenByte) else { throw bad("an invalid method") }
        let rest = UnsafeRawBufferPointer(rebasing: line[(firstSpace + 1)...])
        guard let secondSpace = rest.firstIndex(of: UInt8(ascii: " ")), secondSpace > 0 else {
            throw bad("a malformed request line")
        }
        let target = UnsafeRawBufferPointer(rebasing: rest[..<secondSpace])
        // Visible ASCII only: a target with spaces, controls or raw non-ASCII bytes is not one target.
        guard target.allSatisfy({ $0 > 0x20 && $0 < 0x7F }), isRequestTargetForm(target) else {
            throw bad("an invalid request target")
        }
        let versionBytes = UnsafeRawBufferPointer(rebasing: rest[(secondSpace + 1)...])
        let version: HTTPVersion
        if versionBytes.elementsEqual("HTTP/1.1".utf8) {
            version = .http1_1
        } else if versionBytes.elementsEqual("HTTP/1.0".utf8) {
            version = .http1_0
        } else {
            throw bad("an unsupported HTTP version (HTTP/1.1 and HTTP/1.0 are served)")
        }
        let method = HTTPMethod(rawValue: String(decoding: methodBytes, as: UTF8.self))
        // Methods the proxy does not know are refused rather than guessed at, as NIO's llhttp decoder does.
        if case .RAW = method { throw bad("an unknown method") }
        return (method, String(decoding: target, as: UTF8.self), version)
    }

    /// Origin form (`/path`), asterisk form (`*`) or absolute form (`scheme://...`); anything else is no target.
    private static func isRequestTargetForm(_ target: UnsafeRawBufferPointer) -> Bool {
        guard let first = target.first else { return false }
        if first == UInt8(ascii: "/") || (first == UInt8(ascii: "*") && target.count == 1) { return true }
        guard let colon = target.firstIndex(of: UInt8(ascii: ":")), colon > 0,
            target[..<colon].allSatisfy({ ($0 | 0x20) >= UInt8(ascii: "a") && ($0 | 0x20) <= UInt8(ascii: "z") })
        else { return false }
        return target[colon...].starts(with: "://".utf8)
    }

    /// A header line's name and value, and whether whitespace followed the value.
    private static func parseField(_ line: UnsafeRawBufferPointer) throws(Failure) -> (String, String, Bool) {
        guard let first = line.first, first != 0x20, first != 0x09 else {
            throw bad("a header folded over lines (obs-fold)")
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0 else {
            throw bad("a malformed header line")
        }
        let name = UnsafeRawBufferPointer(rebasing: line[..<colon])
        guard name.allSatisfy(HTTPSyntax.isTokenByte) else { throw bad("an invalid header name") }
        var start = colon + 1
        var end = line.count
        while start < end, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        while end > start, line[end - 1] == 0x20 || line[end - 1] == 0x09 { end -= 1 }
        let value = UnsafeRawBufferPointer(rebasing: line[start..<end])
        guard value.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
            throw bad("a control character in a header value")
        }
        return (String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self), end < line.count)
    }

    /// One decimal number. RFC 9110 section 8.6 lets a recipient accept a list of copies (`5, 5`); llhttp does
    /// not, and neither does this parser: the two must never disagree on framing.
    private static func parseContentLength(_ value: String) -> Int? {
        let digits = value.utf8
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(value)
    }

    private static func bad(_ reason: String) -> Failure {
        Failure(kind: .badRequest, reason: reason)
    }

    // MARK: Chunks

    private mutating func nextChunkSize(from buffer: inout ByteBuffer) throws(Failure) -> HTTPServerRequestPart? {
        guard let lineLength = try Self.lineLength(in: buffer, limit: Self.maximumChunkLineBytes, what: "chunk-size")
        else { return nil }
        let size = try buffer.withUnsafeReadableBytes { bytes throws(Failure) in
            try Self.parseChunkSize(UnsafeRawBufferPointer(rebasing: bytes[0..<lineLength]))
        }
        buffer.moveReaderIndex(forwardBy: lineLength + 2)
        if size == 0 {
            state = .trailers(bytes: 0)
            return try nextTrailers(from: &buffer, counted: 0)
        }
        state = .chunkData(remaining: size)
        return try next(from: &buffer)
    }

    /// A chunk-size with optional extensions (ignored, but held to their grammar): `1a;name=value;flag`.
    private static func parseChunkSize(_ line: UnsafeRawBufferPointer) throws(Failure) -> Int {
        var size = 0
        var digits = 0
        var index = 0
        while index < line.count, let digit = HTTPSyntax.hexValue(line[index]) {
            guard digits < 15 else { throw bad("a chunk size that is too large") }
            size = size << 4 | Int(digit)
            digits += 1
            index += 1
        }
        guard digits > 0 else { throw bad("a malformed chunk size") }
        var extensions = ExtensionReader(line: line, index: index)
        guard extensions.readAll() else { throw bad("a malformed chunk extension") }
        return size
    }

    /// `*( ";" name [ "=" ( token / quoted-string ) ] )` (RFC 9112 section 7.1.1). The "bad whitespace" the
    /// RFC lets a recipient remove around the separators is refused, as llhttp refuses it.
    private struct ExtensionReader {
        let line: UnsafeRawBufferPointer
        var index: Int

        mutating func readAll() -> Bool {
            while index < line.count {
                guard take(UInt8(ascii: ";")), takeToken() else { return false }
                if take(UInt8(ascii: "=")) {
                    guard takeToken() || takeQuotedString() else { return false }
                }
            }
            return true
        }

        private mutating func take(_ byte: UInt8) -> Bool {
            guard index < line.count, line[index] == byte else { return false }
            index += 1
            return true
        }

        private mutating func takeToken() -> Bool {
            let start = index
            while index < line.count, HTTPSyntax.isTokenByte(line[index]) { index += 1 }
            return index > start
        }

        private mutating func takeQuotedString() -> Bool {
            guard take(UInt8(ascii: "\"")) else { return false }
            while index < line.count {
                let byte = line[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""): return true
                case UInt8(ascii: "\\"):
                    guard index < line.count, line[index] == 0x09 || (line[index] >= 0x20 && line[index] != 0x7F) else {
                        return false
                    }
                    index += 1
                case 0x09, 0x20...0x7E, 0x80...: continue
                default: return false
                }
            }
            return false
        }
    }

    /// Trailer fields are read and dropped: the proxy forwards none of them.
    private mutating func nextTrailers(
        from buffer: inout ByteBuffer,
        counted: Int
    ) throws(Failure) -> HTTPServerRequestPart? {
        var counted = counted
        while let lineLength = try Self.lineLength(in: buffer, limit: maximumHeadBytes - counted, what: "trailer") {
            if lineLength > 0 {
                // Dropped, but still held to the syntax of a header line.
                _ = try buffer.withUnsafeReadableBytes { bytes throws(Failure) in
                    try Self.parseField(UnsafeRawBufferPointer(rebasing: bytes[0..<lineLength]))
                }
            }
            buffer.moveReaderIndex(forwardBy: lineLength + 2)
            counted += lineLength + 2
            if lineLength == 0 {
                state = .head(scanned: 0)
                return .end(nil)
            }
        }
        state = .trailers(bytes: counted)
        return nil
    }

    /// The length of the line at the start of `buffer` without its CRLF; nil when it is not complete yet.
    private static func lineLength(in buffer: ByteBuffer, limit: Int, what: String) throws(Failure) -> Int? {
        let lineFeed = buffer.withUnsafeReadableBytes { $0.firstIndex(of: 0x0A) }
        guard let lineFeed else {
            guard buffer.readableBytes <= limit else { throw bad("a \(what) line that is too long") }
            return nil
        }
        guard lineFeed > 0, buffer.getInteger(at: buffer.readerIndex + lineFeed - 1, as: UInt8.self) == 0x0D else {
            throw bad("a bare line feed in a \(what) line")
        }
        guard lineFeed + 1 <= limit else { throw bad("a \(what) line that is too long") }
        return lineFeed - 1
    }
}

/// The CRLF-terminated lines of a head (without its final CRLFCRLF), as ranges; a bare LF makes it invalid.
private struct LineReader {
    let bytes: UnsafeRawBufferPointer
    var position = 0
    private(set) var isValid = true

    init(bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    mutating func next() -> Range<Int>? {
        guard isValid, position < bytes.count || (position == 0 && bytes.isEmpty) else { return nil }
        let start = position
        var index = start
        while index < bytes.count {
            if bytes[index] == 0x0A {
                guard index > start, bytes[index - 1] == 0x0D else {
                    isValid = false
                    return nil
                }
                position = index + 1
                return start..<(index - 1)
            }
            index += 1
        }
        position = bytes.count + 1
        return start..<bytes.count
    }
}
