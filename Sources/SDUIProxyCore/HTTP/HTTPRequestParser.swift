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
///
/// Not `Sendable`: its copies share one record of the last head's fields (``RepeatedRequestFields``), so a parser
/// and its copies belong to one connection.
public struct HTTPRequestParser {
    /// Why the bytes on a connection are not a request this parser accepts.
    public typealias Failure = HTTPParseFailure

    /// The longest chunk-size line (size, extensions and CRLF) accepted.
    public static let maximumChunkLineBytes = HTTPMessageSyntax.maximumChunkLineBytes

    private enum State {
        /// Before a request head: scanning for the blank line that ends it; `scanned` bytes have no CRLFCRLF.
        case head(scanned: Int)
        /// After a head: its body, or just its end.
        case body(HTTPBodyDecoder)
    }

    private var state = State.head(scanned: 0)
    /// Whether the head ``next(from:)`` returned last leaves the connection open (its `Connection` tokens and its
    /// version), as its fields were parsed: asking the head's `HTTPHeaders` searched them again, on every request.
    /// It speaks of that head only, read right after `next(from:)` returned it (before any head, it is `true`).
    public private(set) var headKeepsConnectionOpen = true
    /// The longest request head (request line, header lines and the blank line) accepted.
    public let maximumHeadBytes: Int
    /// The last head's field lines and what they were read as, for a next head that repeats them.
    private let repeatedFields = RepeatedRequestFields()

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
        case .body(var body):
            let event = try body.next(from: &buffer)
            switch event {
            case .part(let part)?:
                state = .body(body)
                return .body(part)
            case .end?:
                state = .head(scanned: 0)
                return .end(nil)
            case nil:
                state = .body(body)
                return nil
            }
        }
    }

    /// Checks what is left when the client has closed its side: only a connection between requests may end.
    public func finish() throws(Failure) {
        guard isBetweenRequests else {
            throw Failure(kind: .badRequest, reason: "the connection ended inside a request")
        }
    }

    // MARK: Heads

    private mutating func nextHead(
        from buffer: inout ByteBuffer,
        scanned: Int
    ) throws(Failure) -> HTTPServerRequestPart? {
        let readable = buffer.readableBytes
        // The blank line that ends the head; the scan resumes where it stopped (minus a partial CRLFCRLF).
        guard let (end, fieldLines) = HTTPMessageSyntax.headEnd(in: buffer, scanned: scanned) else {
            guard readable <= maximumHeadBytes else { throw Self.headTooLarge(maximumHeadBytes) }
            state = .head(scanned: readable)
            return nil
        }
        guard end + 4 <= maximumHeadBytes else { throw Self.headTooLarge(maximumHeadBytes) }
        let limit = maximumHeadBytes
        let parsed = try buffer.withUnsafeReadableBytes { bytes throws(Failure) in
            try Self.parseHead(
                UnsafeRawBufferPointer(rebasing: bytes[0..<end]),
                fieldLines: fieldLines,
                maximumTrailerBytes: limit,
                repeating: repeatedFields
            )
        }
        buffer.moveReaderIndex(forwardBy: end + 4)
        state = parsed.framing
        headKeepsConnectionOpen = parsed.keepsConnectionOpen
        return .head(parsed.head)
    }

    private static func headTooLarge(_ limit: Int) -> Failure {
        Failure(kind: .headersTooLarge, reason: "the request head exceeds \(limit) bytes")
    }

    /// Parses a head without its final CRLFCRLF, with `fieldLines` field lines when the scan counted them; its
    /// field lines are taken from `repeated` when they are the ones it kept, and kept there when they are not.
    private static func parseHead(
        _ bytes: UnsafeRawBufferPointer,
        fieldLines: Int?,
        maximumTrailerBytes: Int,
        repeating repeated: RepeatedRequestFields
    ) throws(Failure) -> (head: HTTPRequestHead, framing: State, keepsConnectionOpen: Bool) {
        var lines = LineReader(bytes: bytes)
        guard let requestLine = lines.next() else { throw bad("an empty request line") }
        let (method, uri, version) = try parseRequestLine(UnsafeRawBufferPointer(rebasing: bytes[requestLine]))
        let fieldBytes = UnsafeRawBufferPointer(rebasing: bytes[min(lines.position, bytes.count)...])
        let fields: HTTPMessageSyntax.FieldSection
        let headers: HTTPHeaders
        if let same = repeated.fields(repeating: fieldBytes) {
            (fields, headers) = same
        } else {
            (fields, headers) = try HTTPMessageSyntax.parseFields(
                &lines,
                fieldLines: fieldLines,
                failing: .badRequest
            )
            repeated.keep(fieldBytes, section: fields, headers: headers)
        }

        let body: HTTPBodyDecoder
        if !fields.codings.isEmpty {
            guard fields.contentLength == nil else { throw bad("both Content-Length and Transfer-Encoding") }
            guard fields.isChunked else { throw bad("a Transfer-Encoding that does not end in chunked") }
            body = .chunked(maximumTrailerBytes: maximumTrailerBytes, failing: .badRequest)
        } else {
            body = .length(fields.contentLength ?? 0, failing: .badRequest)
        }
        return (
            HTTPRequestHead(version: version, method: method, uri: uri, headers: headers),
            .body(body),
            fields.connection.keepsConnectionOpen(version: version)
        )
    }

    private static func parseRequestLine(
        _ line: UnsafeRawBufferPointer
    ) throws(Failure) -> (HTTPMethod, String, HTTPVersion) {
        guard let firstSpace = ByteSearch.firstIndex(of: UInt8(ascii: " "), in: line), firstSpace > 0 else {
            throw bad("a malformed request line")
        }
        let methodBytes = UnsafeRawBufferPointer(rebasing: line[..<firstSpace])
        guard methodBytes.allSatisfy(HTTPSyntax.isTokenByte) else { throw bad("an invalid method") }
        let rest = UnsafeRawBufferPointer(rebasing: line[(firstSpace + 1)...])
        guard let secondSpace = ByteSearch.firstIndex(of: UInt8(ascii: " "), in: rest), secondSpace > 0 else {
            throw bad("a malformed request line")
        }
        let target = UnsafeRawBufferPointer(rebasing: rest[..<secondSpace])
        // Visible ASCII only: a target with spaces, controls or raw non-ASCII bytes is not one target.
        guard target.allSatisfy({ $0 > 0x20 && $0 < 0x7F }), isRequestTargetForm(target) else {
            throw bad("an invalid request target")
        }
        guard let version = HTTPMessageSyntax.version(UnsafeRawBufferPointer(rebasing: rest[(secondSpace + 1)...]))
        else {
            throw bad("an unsupported HTTP version (HTTP/1.1 and HTTP/1.0 are served)")
        }
        // Any token is a method (RFC 9110 section 9.1), registered or not, and case-sensitive: one NIO does not
        // name (`.RAW`) is forwarded exactly as received.
        let method = CommonRequestSpellings.method(methodBytes)
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

    private static func bad(_ reason: String) -> Failure {
        Failure(kind: .badRequest, reason: reason)
    }
}
