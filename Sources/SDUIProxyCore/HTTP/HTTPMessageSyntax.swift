import NIOCore
import NIOHTTP1

/// Why bytes are not an HTTP/1.1 message the proxy accepts, from a client or from the backend.
public struct HTTPParseFailure: Error, Equatable, Sendable, CustomStringConvertible {
    /// `badRequest`, `headersTooLarge` or `uriTooLong` for requests; `network` for the backend's responses.
    public var kind: ProxyError.Kind
    public var reason: String

    public init(kind: ProxyError.Kind, reason: String) {
        self.kind = kind
        self.reason = reason
    }

    public var description: String { reason }

    public var proxyError: ProxyError {
        switch kind {
        case .badRequest: ProxyError(kind, "malformed HTTP request: \(reason)")
        case .network: ProxyError(kind, "malformed response from the backend: \(reason)")
        default: ProxyError(kind, reason)
        }
    }
}

/// The parts of RFC 9112 that requests and responses share, held to the same strictness in both parsers:
/// the head's lines and fields, `Content-Length`, and chunked bodies.
enum HTTPMessageSyntax {
    static let crlf = UInt16(0x0D0A)

    /// The longest chunk-size line (size, extensions and CRLF) accepted.
    static let maximumChunkLineBytes = 1024

    /// `HTTP/1.1` or `HTTP/1.0`; nil for any other version.
    static func version(_ bytes: UnsafeRawBufferPointer) -> HTTPVersion? {
        // Compared as one 8-byte word: every request and response line has a version to read.
        guard bytes.count == 8 else { return nil }
        switch UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self)) {
        case 0x312E_312F_5054_5448: return .http1_1  // "HTTP/1.1"
        case 0x302E_312F_5054_5448: return .http1_0  // "HTTP/1.0"
        default: return nil
        }
    }

    /// Where the blank line that ends a head starts, resuming a scan that stopped after `scanned` bytes, and how
    /// many field lines the head has (the lines after its start line): nil when the scan resumed, and so did not
    /// see the lines before.
    ///
    /// Line feed to line feed, by `memchr`: a head's lines are a few dozen bytes each, and a loop in Swift that
    /// stepped up to four bytes at a time cost a request and its response about 1,000 instructions. The lines are
    /// counted on the way, for the parsers to make room for the fields at once: counted again afterwards, they
    /// cost a request and its response about 500 instructions more.
    static func headEnd(in buffer: ByteBuffer, scanned: Int) -> (end: Int, fieldLines: Int?)? {
        buffer.withUnsafeReadableBytes { bytes in
            // A blank line ends with the fourth byte of CR LF CR LF, so a resumed search starts three bytes before
            // where the last one stopped.
            var from = scanned == 0 ? 0 : max(3, scanned)
            var lineFeeds = 0
            while let lineFeed = ByteSearch.firstIndex(of: 0x0A, in: bytes, from: from) {
                lineFeeds += 1
                if lineFeed >= 3, bytes[lineFeed - 1] == 0x0D, bytes[lineFeed - 2] == 0x0A, bytes[lineFeed - 3] == 0x0D
                {
                    // Every line but the blank one ends with a line feed, the start line's among them.
                    return (lineFeed - 3, scanned == 0 ? max(lineFeeds - 2, 0) : nil)
                }
                from = lineFeed + 1
            }
            return nil
        }
    }

    /// What framing needs of a head's fields (the lines after its start line), read as they are parsed.
    struct FieldSection {
        var contentLength: Int?
        /// The transfer codings, in order; empty when there is no `Transfer-Encoding`.
        var codings: [String] = []
        /// The `Connection` tokens that decide keep-alive, read as the fields are.
        var connection = ConnectionOptions()

        /// Whether the codings end in `chunked` (the only coding the proxy decodes).
        var isChunked: Bool {
            guard let last = codings.last else { return false }
            return HTTPSyntax.equalsIgnoringCase(last, "chunked")
        }
    }

    /// Reads the field lines left in `lines` as `HTTPHeaders`, failing with `kind` on anything two parsers could
    /// read differently.
    ///
    /// `fieldLines` is how many field lines are left when the caller knows (``headEnd(in:scanned:)``).
    static func parseFields(
        _ lines: inout LineReader,
        fieldLines: Int? = nil,
        failing kind: ProxyError.Kind
    ) throws(HTTPParseFailure) -> (FieldSection, HTTPHeaders) {
        // The fields are gathered as a plain list and handed to `HTTPHeaders` whole: its `add` retains the name
        // and value it is given and walks the name again. One allocation for the list rather than one per
        // doubling (four for a backend's usual nine lines).
        var fields: [(String, String)] = []
        fields.reserveCapacity(fieldLines ?? lines.remainingLineCount)
        let section = try readFields(&lines, failing: kind) { name, value in
            fields.append((CommonRequestSpellings.fieldName(name), String(decoding: value, as: UTF8.self)))
        }
        // The names are tokens, so ASCII, as `HTTPHeaders` requires.
        return (section, HTTPHeaders(fields))
    }

    /// Reads the field lines left in `lines` as ``HTTPFieldLines``, held to the same rules as
    /// ``parseFields(_:fieldLines:failing:)``: the backend's answers, whose fields a cache fill reads in place.
    static func parseFieldLines(
        _ lines: inout LineReader,
        fieldLines: Int? = nil,
        failing kind: ProxyError.Kind
    ) throws(HTTPParseFailure) -> (FieldSection, HTTPFieldLines) {
        // The lines are copied whole, once; each field is then where it lies in the copy.
        let block = UnsafeRawBufferPointer(rebasing: lines.bytes[min(lines.position, lines.bytes.count)...])
        var fields = HTTPFieldLines(copying: block, reservingFields: fieldLines ?? lines.remainingLineCount)
        let section = try readFields(&lines, failing: kind) { name, value in
            fields.appendField(name: name, value: value, in: block)
        }
        return (section, fields)
    }

    /// The fields' framing and `Connection` tokens, each field handed to `collect` once checked.
    private static func readFields(
        _ lines: inout LineReader,
        failing kind: ProxyError.Kind,
        collect: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void
    ) throws(HTTPParseFailure) -> FieldSection {
        var section = FieldSection()
        let bytes = lines.bytes
        while true {
            // A plain line in one pass; any other, and the end, line by line, where a bad one gets its exact error.
            let field: (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, padded: Bool)
            if let plain = lines.nextPlainField() {
                field = plain
            } else {
                guard let line = lines.next() else { break }
                field = try parseField(UnsafeRawBufferPointer(rebasing: bytes[line]), failing: kind)
            }
            // Names are compared where they lie; only the framing fields' values become strings.
            let isLength = HTTPSyntax.equalsIgnoringCase(bytes: field.name, "content-length")
            let isCoding = !isLength && HTTPSyntax.equalsIgnoringCase(bytes: field.name, "transfer-encoding")
            // The framing fields are held to llhttp's strictness: whitespace after them is refused.
            if isLength || isCoding, field.padded {
                throw HTTPParseFailure(
                    kind: kind,
                    reason: "whitespace after the value of \(String(decoding: field.name, as: UTF8.self))"
                )
            }
            if isLength {
                guard let length = parseContentLength(field.value) else {
                    throw HTTPParseFailure(kind: kind, reason: "an invalid Content-Length")
                }
                guard section.contentLength == nil || section.contentLength == length else {
                    throw HTTPParseFailure(kind: kind, reason: "conflicting Content-Length values")
                }
                section.contentLength = length
            } else if isCoding {
                let value = String(decoding: field.value, as: UTF8.self)
                for coding in value.split(separator: ",", omittingEmptySubsequences: false) {
                    let coding = coding.trimmingWhitespace()
                    guard !coding.isEmpty else {
                        throw HTTPParseFailure(kind: kind, reason: "an empty element in Transfer-Encoding")
                    }
                    section.codings.append(coding)
                }
            } else if HTTPSyntax.equalsIgnoringCase(bytes: field.name, "connection") {
                section.connection.read(field.value)
            }
            collect(field.name, field.value)
        }
        guard lines.isValid else { throw HTTPParseFailure(kind: kind, reason: "a bare line feed in the head") }
        return section
    }

    /// A header line's name and value, where they lie in `line`, and whether whitespace followed the value.
    static func parseField(
        _ line: UnsafeRawBufferPointer,
        failing kind: ProxyError.Kind
    ) throws(HTTPParseFailure) -> (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, padded: Bool) {
        guard let first = line.first, first != 0x20, first != 0x09 else {
            throw HTTPParseFailure(kind: kind, reason: "a header folded over lines (obs-fold)")
        }
        guard let colon = ByteSearch.firstIndex(of: UInt8(ascii: ":"), in: line), colon > 0 else {
            throw HTTPParseFailure(kind: kind, reason: "a malformed header line")
        }
        let name = UnsafeRawBufferPointer(rebasing: line[..<colon])
        guard HTTPSyntax.isToken(bytes: name) else {
            throw HTTPParseFailure(kind: kind, reason: "an invalid header name")
        }
        var start = colon + 1
        var end = line.count
        while start < end, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        while end > start, line[end - 1] == 0x20 || line[end - 1] == 0x09 { end -= 1 }
        let value = UnsafeRawBufferPointer(rebasing: line[start..<end])
        guard HTTPSyntax.isFieldValue(bytes: value) else {
            throw HTTPParseFailure(kind: kind, reason: "a control character in a header value")
        }
        return (name, value, end < line.count)
    }

    /// One decimal number. RFC 9110 section 8.6 lets a recipient accept a list of copies (`5, 5`); llhttp does
    /// not, and neither do these parsers: two parsers must never disagree on framing.
    static func parseContentLength(_ digits: UnsafeRawBufferPointer) -> Int? {
        guard !digits.isEmpty, digits.count <= 18 else { return nil }
        var length = 0
        for byte in digits {
            let digit = byte &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            length = length * 10 + Int(digit)
        }
        return length
    }

    /// The length of the line at the start of `buffer` without its CRLF; nil when it is not complete yet.
    static func lineLength(
        in buffer: ByteBuffer,
        limit: Int,
        what: String,
        failing kind: ProxyError.Kind
    ) throws(HTTPParseFailure) -> Int? {
        let lineFeed = buffer.withUnsafeReadableBytes { $0.firstIndex(of: 0x0A) }
        guard let lineFeed else {
            guard buffer.readableBytes <= limit else {
                throw HTTPParseFailure(kind: kind, reason: "a \(what) line that is too long")
            }
            return nil
        }
        guard lineFeed > 0, buffer.getInteger(at: buffer.readerIndex + lineFeed - 1, as: UInt8.self) == 0x0D else {
            throw HTTPParseFailure(kind: kind, reason: "a bare line feed in a \(what) line")
        }
        guard lineFeed + 1 <= limit else {
            throw HTTPParseFailure(kind: kind, reason: "a \(what) line that is too long")
        }
        return lineFeed - 1
    }

    /// A chunk-size with optional extensions (ignored, but held to their grammar): `1a;name=value;flag`.
    static func parseChunkSize(
        _ line: UnsafeRawBufferPointer,
        failing kind: ProxyError.Kind
    ) throws(HTTPParseFailure) -> Int {
        var size = 0
        var digits = 0
        var index = 0
        while index < line.count, let digit = HTTPSyntax.hexValue(line[index]) {
            guard digits < 15 else { throw HTTPParseFailure(kind: kind, reason: "a chunk size that is too large") }
            size = size << 4 | Int(digit)
            digits += 1
            index += 1
        }
        guard digits > 0 else { throw HTTPParseFailure(kind: kind, reason: "a malformed chunk size") }
        var extensions = ExtensionReader(line: line, index: index)
        guard extensions.readAll() else { throw HTTPParseFailure(kind: kind, reason: "a malformed chunk extension") }
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
}

/// The body of one message after its head: a known length, chunks, or everything up to the end of the
/// connection (responses only). Parts are slices of the input, never copies.
struct HTTPBodyDecoder: Sendable {
    enum Event {
        case part(ByteBuffer)
        case end
    }

    private enum State {
        case length(remaining: Int)
        /// Before a chunk-size line.
        case chunkSize
        /// In a chunk's data.
        case chunkData(remaining: Int)
        /// After a chunk's data: its CRLF.
        case chunkEnd
        /// In the trailer section after the last chunk; `bytes` counted so far against the limit.
        case trailers(bytes: Int)
        case untilClose
        case ended
    }

    private var state: State
    /// The longest trailer section accepted.
    private let maximumTrailerBytes: Int
    /// The error kind for malformed bodies: `badRequest` from clients, `network` from the backend.
    private let failureKind: ProxyError.Kind

    private init(_ state: State, maximumTrailerBytes: Int, failing kind: ProxyError.Kind) {
        self.state = state
        self.maximumTrailerBytes = maximumTrailerBytes
        self.failureKind = kind
    }

    static func length(_ length: Int, failing kind: ProxyError.Kind) -> Self {
        Self(length > 0 ? .length(remaining: length) : .ended, maximumTrailerBytes: 0, failing: kind)
    }

    static func chunked(maximumTrailerBytes: Int, failing kind: ProxyError.Kind) -> Self {
        Self(.chunkSize, maximumTrailerBytes: maximumTrailerBytes, failing: kind)
    }

    static func untilClose(failing kind: ProxyError.Kind) -> Self {
        Self(.untilClose, maximumTrailerBytes: 0, failing: kind)
    }

    /// Whether the body ends only when the connection does.
    var endsWithConnection: Bool {
        if case .untilClose = state { return true }
        return false
    }

    /// The next part of the body from `buffer`, or its end; nil when `buffer` holds neither yet.
    mutating func next(from buffer: inout ByteBuffer) throws(HTTPParseFailure) -> Event? {
        switch state {
        case .length(let remaining):
            guard let (part, left) = Self.readBody(upTo: remaining, from: &buffer) else { return nil }
            state = left == 0 ? .ended : .length(remaining: left)
            return .part(part)
        case .chunkSize:
            return try nextChunkSize(from: &buffer)
        case .chunkData(let remaining):
            guard let (part, left) = Self.readBody(upTo: remaining, from: &buffer) else { return nil }
            state = left == 0 ? .chunkEnd : .chunkData(remaining: left)
            return .part(part)
        case .chunkEnd:
            guard buffer.readableBytes >= 2 else { return nil }
            guard buffer.readInteger(as: UInt16.self) == HTTPMessageSyntax.crlf else {
                throw HTTPParseFailure(kind: failureKind, reason: "a chunk's data is not followed by CRLF")
            }
            state = .chunkSize
            return try nextChunkSize(from: &buffer)
        case .trailers(let bytes):
            return try nextTrailers(from: &buffer, counted: bytes)
        case .untilClose:
            guard let (part, _) = Self.readBody(upTo: buffer.readableBytes, from: &buffer) else { return nil }
            return .part(part)
        case .ended:
            return .end
        }
    }

    /// At the end of input: the body's end when it runs to the close, a failure when it was cut short.
    mutating func finish() throws(HTTPParseFailure) -> Event {
        switch state {
        case .untilClose, .ended:
            state = .ended
            return .end
        default:
            throw HTTPParseFailure(kind: failureKind, reason: "the connection ended inside a body")
        }
    }

    /// As much of the `remaining` body bytes as `buffer` holds (without copying), and how many are left after
    /// them; nil when it holds none.
    private static func readBody(upTo remaining: Int, from buffer: inout ByteBuffer) -> (ByteBuffer, left: Int)? {
        guard let part = buffer.readSlice(length: min(remaining, buffer.readableBytes)), part.readableBytes > 0
        else { return nil }
        return (part, remaining - part.readableBytes)
    }

    private mutating func nextChunkSize(from buffer: inout ByteBuffer) throws(HTTPParseFailure) -> Event? {
        guard
            let lineLength = try HTTPMessageSyntax.lineLength(
                in: buffer,
                limit: HTTPMessageSyntax.maximumChunkLineBytes,
                what: "chunk-size",
                failing: failureKind
            )
        else { return nil }
        let kind = failureKind
        let size = try buffer.withUnsafeReadableBytes { bytes throws(HTTPParseFailure) in
            try HTTPMessageSyntax.parseChunkSize(UnsafeRawBufferPointer(rebasing: bytes[0..<lineLength]), failing: kind)
        }
        buffer.moveReaderIndex(forwardBy: lineLength + 2)
        if size == 0 {
            state = .trailers(bytes: 0)
            return try nextTrailers(from: &buffer, counted: 0)
        }
        state = .chunkData(remaining: size)
        return try next(from: &buffer)
    }

    /// Trailer fields are read and dropped: the proxy forwards none of them.
    private mutating func nextTrailers(from buffer: inout ByteBuffer, counted: Int) throws(HTTPParseFailure) -> Event? {
        var counted = counted
        let kind = failureKind
        while let lineLength = try HTTPMessageSyntax.lineLength(
            in: buffer,
            limit: maximumTrailerBytes - counted,
            what: "trailer",
            failing: kind
        ) {
            if lineLength > 0 {
                // Dropped, but still held to the syntax of a header line.
                _ = try buffer.withUnsafeReadableBytes { bytes throws(HTTPParseFailure) in
                    try HTTPMessageSyntax.parseField(
                        UnsafeRawBufferPointer(rebasing: bytes[0..<lineLength]),
                        failing: kind
                    )
                }
            }
            buffer.moveReaderIndex(forwardBy: lineLength + 2)
            counted += lineLength + 2
            if lineLength == 0 {
                state = .ended
                return .end
            }
        }
        state = .trailers(bytes: counted)
        return nil
    }
}

/// What a message's `Connection` header says about keeping the connection open (RFC 9112 section 9.3), decided
/// as NIO's `isKeepAlive` decides it: `close` closes, so does more than one of `close` and `keep-alive`; one
/// `keep-alive` keeps it open; with neither, HTTP/1.1 keeps it open and HTTP/1.0 does not. NIO splits the header
/// into arrays to find out, on every message a parser built; this reads the tokens in place.
struct ConnectionOptions {
    private var closes = false
    private var keepAlives = 0

    /// Reads one `Connection` field value.
    mutating func read(_ value: String) {
        value.withContiguousUTF8 { read(UnsafeRawBufferPointer($0)) }
    }

    /// Reads one `Connection` field value where it lies.
    mutating func read(_ value: UnsafeRawBufferPointer) {
        var rest = value[...]
        while !rest.isEmpty {
            let comma = rest.firstIndex(of: UInt8(ascii: ",")) ?? rest.endIndex
            let token = HTTPSyntax.trimmingOptionalWhitespace(rest[..<comma])
            if HTTPSyntax.equalsIgnoringCase(bytes: token, "close") {
                closes = true
            } else if HTTPSyntax.equalsIgnoringCase(bytes: token, "keep-alive") {
                keepAlives += 1
            }
            rest = comma == rest.endIndex ? rest[comma...] : rest[rest.index(after: comma)...]
        }
    }

    func keepsConnectionOpen(version: HTTPVersion) -> Bool {
        if closes || keepAlives > 1 { return false }
        return keepAlives == 1 || (version.major == 1 && version.minor >= 1)
    }
}

extension HTTPSyntax {
    /// Whether a message with `headers` leaves its connection open (see ``ConnectionOptions``).
    static func isKeepAlive(_ headers: HTTPHeaders, version: HTTPVersion) -> Bool {
        var options = ConnectionOptions()
        for value in headers["connection"] { options.read(value) }
        return options.keepsConnectionOpen(version: version)
    }
}

extension HTTPRequestHead {
    /// ``HTTPSyntax/isKeepAlive(_:version:)`` for this request: NIO's answer without splitting `Connection`
    /// into arrays (at most one small array, of the `Connection` values, when the header is there).
    public var keepsConnectionOpen: Bool { HTTPSyntax.isKeepAlive(headers, version: version) }
}
