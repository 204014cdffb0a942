import NIOCore
import NIOHTTP1

/// A strict HTTP/1.1 response parser (RFC 9112) for the proxy's own backend connections: bytes in, response
/// heads, body parts and ends out, one exchange at a time.
///
/// Held to the request parser's rules for fields, `Content-Length` and chunks (``HTTPMessageSyntax``), so a
/// response two parsers could frame differently is refused, never guessed at. Framing follows RFC 9112
/// section 6.3: no body for a response to HEAD or with status 1xx, 204 or 304; then `Transfer-Encoding`
/// (only a final `chunked` is accepted), then `Content-Length`, else the body runs to the end of the
/// connection. Interim 1xx responses come as parts of their own, before the final head; a 101 is refused.
public struct HTTPResponseParser: Sendable {
    /// A response's status and its header fields as they came (``HTTPFieldLines``).
    public struct Head: Sendable {
        public var status: HTTPResponseStatus
        public var version: HTTPVersion
        public var fields: HTTPFieldLines

        /// The fields as a collection.
        public var headers: HTTPHeaders { fields.headers }
    }

    public enum Part: Sendable {
        /// The head; `keepAlive` says whether the connection may carry another exchange after this one;
        /// `bodyLength` is the body's length as the framing states it (0 when there is no body), nil for
        /// chunks or a body that runs to the close.
        case head(Head, keepAlive: Bool, bodyLength: Int?)
        /// An interim response (100 Continue, 103 Early Hints): a head with no body, before the final one.
        case interim(Head)
        case body(ByteBuffer)
        case end
    }

    private enum State {
        /// No request sent: bytes now are not an answer to anything.
        case idle
        /// Waiting for the head of the answer to a request (`isHEAD`: a HEAD request).
        case head(scanned: Int, isHEAD: Bool)
        case body(HTTPBodyDecoder)
    }

    private var state = State.idle
    /// The longest response head (status line, header lines and the blank line) accepted.
    public let maximumHeadBytes: Int

    public init(maximumHeadBytes: Int) {
        self.maximumHeadBytes = maximumHeadBytes
    }

    /// Expects the answer to a request just sent (`isHEAD` for a HEAD request, whose answer has no body).
    public mutating func expectResponse(isHEAD: Bool) {
        state = .head(scanned: 0, isHEAD: isHEAD)
    }

    /// Whether the answer in progress has a body that ends only when the connection does.
    public var bodyEndsWithConnection: Bool {
        if case .body(let body) = state { return body.endsWithConnection }
        return false
    }

    /// The next part of the response from `buffer`, consuming its bytes; nil when `buffer` holds no complete
    /// part. After `.end` the parser expects nothing until ``expectResponse(isHEAD:)``.
    public mutating func next(from buffer: inout ByteBuffer) throws(HTTPParseFailure) -> Part? {
        switch state {
        case .idle:
            guard buffer.readableBytes == 0 else { throw Self.bad("bytes that answer no request") }
            return nil
        case .head(let scanned, let isHEAD):
            return try nextHead(from: &buffer, scanned: scanned, isHEAD: isHEAD)
        case .body(var body):
            let event = try body.next(from: &buffer)
            switch event {
            case .part(let part)?:
                state = .body(body)
                return .body(part)
            case .end?:
                state = .idle
                return .end
            case nil:
                state = .body(body)
                return nil
            }
        }
    }

    /// The response's end when the backend closed the connection: the end of a body that runs to the close;
    /// nil when no response was in progress; a failure when one was cut short.
    public mutating func finish() throws(HTTPParseFailure) -> Part? {
        switch state {
        case .idle:
            return nil
        case .head:
            throw Self.bad("the connection ended before a complete response head")
        case .body(var body):
            _ = try body.finish()
            state = .idle
            return .end
        }
    }

    private mutating func nextHead(
        from buffer: inout ByteBuffer,
        scanned: Int,
        isHEAD: Bool
    ) throws(HTTPParseFailure) -> Part? {
        let readable = buffer.readableBytes
        guard let (end, fieldLines) = HTTPMessageSyntax.headEnd(in: buffer, scanned: scanned) else {
            guard readable <= maximumHeadBytes else { throw Self.headTooLarge(maximumHeadBytes) }
            state = .head(scanned: readable, isHEAD: isHEAD)
            return nil
        }
        guard end + 4 <= maximumHeadBytes else { throw Self.headTooLarge(maximumHeadBytes) }
        // The parts are taken apart at once and the framing read into plain values: each read of a member of
        // the parsed tuple copied all of it, retaining and releasing every array in it.
        let (head, code, framing) = try buffer.withUnsafeReadableBytes { bytes throws(HTTPParseFailure) in
            try Self.parseHead(UnsafeRawBufferPointer(rebasing: bytes[0..<end]), fieldLines: fieldLines)
        }
        buffer.moveReaderIndex(forwardBy: end + 4)
        if (100..<200).contains(code) {
            // An interim response (100 Continue, 103 Early Hints) precedes the real one; 101 would switch
            // protocols, which the proxy never asks for.
            guard code != 101 else { throw Self.bad("a protocol switch nobody asked for") }
            state = .head(scanned: 0, isHEAD: isHEAD)
            return .interim(head)
        }
        let contentLength = framing.contentLength
        let hasCodings = !framing.codings.isEmpty
        let isChunked = framing.isChunked
        var keepAlive = framing.connection.keepsConnectionOpen(version: head.version)
        var bodyLength: Int?
        let body: HTTPBodyDecoder
        if isHEAD || code == 204 || code == 304 {
            bodyLength = 0
            body = .length(0, failing: .network)
        } else if hasCodings {
            guard contentLength == nil else { throw Self.bad("both Content-Length and Transfer-Encoding") }
            if isChunked {
                body = .chunked(maximumTrailerBytes: maximumHeadBytes, failing: .network)
            } else {
                body = .untilClose(failing: .network)
                keepAlive = false
            }
        } else if let length = contentLength {
            bodyLength = length
            body = .length(length, failing: .network)
        } else {
            body = .untilClose(failing: .network)
            keepAlive = false
        }
        state = .body(body)
        return .head(head, keepAlive: keepAlive, bodyLength: bodyLength)
    }

    /// Parses a head without its final CRLFCRLF, with `fieldLines` field lines when the scan counted them; `code`
    /// is the head's status code.
    private static func parseHead(
        _ bytes: UnsafeRawBufferPointer,
        fieldLines: Int?
    ) throws(HTTPParseFailure) -> (head: Head, code: Int, framing: HTTPMessageSyntax.FieldSection) {
        var lines = LineReader(bytes: bytes)
        guard let statusLine = lines.next() else { throw bad("an empty status line") }
        let (version, status, code) = try parseStatusLine(UnsafeRawBufferPointer(rebasing: bytes[statusLine]))
        let (framing, fields) = try HTTPMessageSyntax.parseFieldLines(
            &lines,
            fieldLines: fieldLines,
            failing: .network
        )
        return (Head(status: status, version: version, fields: fields), code, framing)
    }

    /// `HTTP/1.1 200 OK`: the version, a three-digit status (as `HTTPResponseStatus` and as its code) and a
    /// reason phrase, which may be empty.
    private static func parseStatusLine(
        _ line: UnsafeRawBufferPointer
    ) throws(HTTPParseFailure) -> (HTTPVersion, HTTPResponseStatus, Int) {
        guard line.count >= 12, line[8] == UInt8(ascii: " ") else { throw bad("a malformed status line") }
        guard let version = HTTPMessageSyntax.version(UnsafeRawBufferPointer(rebasing: line[0..<8])) else {
            throw bad("an unsupported HTTP version")
        }
        var code = 0
        for index in 9..<12 {
            let digit = line[index] &- UInt8(ascii: "0")
            guard digit < 10 else { throw bad("a malformed status code") }
            code = code * 10 + Int(digit)
        }
        guard code >= 100 else { throw bad("a malformed status code") }
        guard line.count == 12 || line[12] == UInt8(ascii: " ") else { throw bad("a malformed status line") }
        let reason =
            line.count > 13
            ? UnsafeRawBufferPointer(rebasing: line[13...]) : UnsafeRawBufferPointer(start: nil, count: 0)
        guard HTTPSyntax.isFieldValue(bytes: reason) else {
            throw bad("a control character in the reason phrase")
        }
        // A registered code is its status whatever the phrase (NIO keeps only an unregistered code's): the phrase
        // becomes a string only for one of those.
        var status = HTTPResponseStatus(statusCode: code)
        if case .custom = status {
            status = HTTPResponseStatus(statusCode: code, reasonPhrase: String(decoding: reason, as: UTF8.self))
        }
        return (version, status, code)
    }

    private static func headTooLarge(_ limit: Int) -> HTTPParseFailure {
        bad("a response head over \(limit) bytes")
    }

    private static func bad(_ reason: String) -> HTTPParseFailure {
        HTTPParseFailure(kind: .network, reason: reason)
    }
}
