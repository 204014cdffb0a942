import NIOCore
import NIOEmbedded
import NIOHTTP1
import SDUIProxyCore
import Testing

/// What a parser made of the answer to one request: its status, headers and body, or nothing when it refused
/// the bytes or they ended before the response did.
private struct ParsedResponse: Equatable, CustomStringConvertible {
    var code: UInt
    var reason: String
    var headers: [String]
    var body: [UInt8]

    var description: String { "\(code) \(reason) \(headers) body \(body.count)" }

    /// The reason phrase is left out: NIO's decoder drops it for codes it does not know, and it carries no
    /// meaning (RFC 9112 section 4).
    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.headers == rhs.headers && lhs.body == rhs.body
    }

    init(head: HTTPResponseHead) {
        code = head.status.code
        reason = head.status.reasonPhrase
        // Optional whitespace around a value is not part of it (RFC 9110 section 5.5); llhttp keeps it at the
        // end, this parser does not.
        headers = head.headers.map { "\($0.name): \($0.value.trimmingWhitespace())" }
        body = []
    }
}

/// Runs `bytes` through ``HTTPResponseParser`` as the answer to one request, `chunkSize` bytes at a time,
/// then ends the input as a closing backend would.
private func parseOurs(
    _ bytes: [UInt8],
    isHEAD: Bool = false,
    chunkSize: Int = .max,
    maximumHeadBytes: Int = 16 << 10
) -> (ParsedResponse?, keepAlive: Bool, HTTPParseFailure?) {
    var parser = HTTPResponseParser(maximumHeadBytes: maximumHeadBytes)
    parser.expectResponse(isHEAD: isHEAD)
    var response: ParsedResponse?
    var keepAlive = false
    var ended = false
    var buffer = ByteBuffer()
    var offset = 0
    func take(_ part: HTTPResponseParser.Part) {
        switch part {
        case .head(let head, let keeps, _):
            #expect(response == nil, "a second head")
            // The fields as a collection: what the paths that do not read them in place see.
            response = ParsedResponse(
                head: HTTPResponseHead(version: head.version, status: head.status, headers: head.headers)
            )
            keepAlive = keeps
        case .interim:
            // Interim heads come before the final one, and are compared where they are tested.
            #expect(response == nil, "an interim head after the final one")
        case .body(let part):
            #expect(response != nil && !ended, "a body part outside the response")
            response?.body += part.readableBytesView
        case .end:
            #expect(response != nil && !ended, "an end outside the response")
            ended = true
        }
    }
    do {
        while offset < bytes.count, !ended {
            let end = min(bytes.count, offset + chunkSize)
            buffer.writeBytes(bytes[offset..<end])
            offset = end
            while !ended, let part = try parser.next(from: &buffer) { take(part) }
        }
        if !ended, let part = try parser.finish() { take(part) }
    } catch {
        return (nil, false, error)
    }
    return (ended ? response : nil, keepAlive, nil)
}

/// Runs `bytes` through NIO's llhttp-based `HTTPResponseDecoder` as the answer to one GET; interim 1xx heads,
/// which the proxy's parser skips, are left out.
private func parseWithNIO(_ bytes: [UInt8]) throws -> ParsedResponse? {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)))
    try channel.writeOutbound(HTTPClientRequestPart.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: "/")))
    var failed = false
    do {
        try channel.writeInbound(ByteBuffer(bytes: bytes))
    } catch {
        failed = true
    }
    do {
        _ = try channel.finish()
    } catch {
        failed = true
    }
    var response: ParsedResponse?
    var ended = false
    while let part = try channel.readInbound(as: HTTPClientResponsePart.self) {
        switch part {
        case .head(let head) where (100..<200).contains(head.status.code):
            continue
        case .head(let head):
            if response == nil { response = ParsedResponse(head: head) }
        case .body(let buffer):
            if !ended { response?.body += buffer.readableBytesView }
        case .end:
            if response != nil { ended = true }
        }
    }
    return ended && !(failed && response == nil) ? response : nil
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("HTTPResponseParser")
struct HTTPResponseParserTests {
    @Test("framing by Content-Length, by chunks with extensions and trailers, and by the end of the connection")
    func framing() throws {
        let (sized, sizedKeepAlive, _) = parseOurs(
            bytes("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"42\"}")
        )
        #expect(sized?.code == 200 && sized?.body == bytes("{\"id\":\"42\"}"))
        #expect(sized?.headers == ["Content-Type: application/json", "Content-Length: 11"])
        #expect(sizedKeepAlive)

        let (chunked, chunkedKeepAlive, _) = parseOurs(
            bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;a=b\r\nabcd\r\n2\r\nef\r\n0\r\nT: v\r\n\r\n")
        )
        #expect(chunked?.body == bytes("abcdef"))
        #expect(chunkedKeepAlive)

        let (untilClose, closeKeepAlive, _) = parseOurs(
            bytes("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nto the end")
        )
        #expect(untilClose?.body == bytes("to the end"))
        #expect(!closeKeepAlive)

        let (closing, closingKeepAlive, _) = parseOurs(
            bytes("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi")
        )
        #expect(closing?.body == bytes("hi"))
        #expect(!closingKeepAlive)
    }

    @Test("RFC 9110 §15.2: interim answers come as parts of their own, with their fields, before the final head")
    func interimParts() throws {
        var parser = HTTPResponseParser(maximumHeadBytes: 1024)
        parser.expectResponse(isHEAD: false)
        var buffer = ByteBuffer(
            string: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        )
        var seen: [String] = []
        while let part = try parser.next(from: &buffer) {
            switch part {
            case .interim(let head): seen.append("\(head.status.code) \(head.headers.map { "\($0.name)=\($0.value)" })")
            case .head(let head, _, _): seen.append("final \(head.status.code) \(head.headers.map(\.name))")
            case .body(let body): seen.append("body \(String(buffer: body))")
            case .end: seen.append("end")
            }
        }
        #expect(
            seen == [
                "100 []", "103 [\"Link=</a.css>; rel=preload\"]", "final 200 [\"Content-Length\"]", "body ok", "end",
            ]
        )
        var switching = HTTPResponseParser(maximumHeadBytes: 1024)
        switching.expectResponse(isHEAD: false)
        var upgrade = ByteBuffer(string: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n")
        #expect(throws: HTTPParseFailure.self) { try switching.next(from: &upgrade) }
    }

    @Test("no body after a HEAD, a 204 or a 304, whatever the length fields say; interim 1xx answers come first")
    func bodiless() {
        let (head, _, _) = parseOurs(bytes("HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n"), isHEAD: true)
        #expect(head?.code == 200 && head?.body == [])
        let (noContent, _, _) = parseOurs(bytes("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"))
        #expect(noContent?.code == 204 && noContent?.body == [])
        let (notModified, keepAlive, _) = parseOurs(bytes("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"))
        #expect(notModified?.code == 304 && keepAlive)
        let (afterContinue, _, _) = parseOurs(
            bytes(
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
            )
        )
        #expect(afterContinue?.code == 201 && afterContinue?.body == bytes("ok"))
        let (custom, _, _) = parseOurs(bytes("HTTP/1.1 299 Quite Fine\r\nContent-Length: 0\r\n\r\n"))
        #expect(custom?.code == 299 && custom?.reason == "Quite Fine")
        let (noReason, _, _) = parseOurs(bytes("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n"))
        #expect(noReason?.code == 200)
    }

    @Test("the head tells the body's length as its framing states it, not as a Content-Length claims it")
    func bodyLength() throws {
        func length(_ text: String, isHEAD: Bool = false) throws -> Int?? {
            var parser = HTTPResponseParser(maximumHeadBytes: 1024)
            parser.expectResponse(isHEAD: isHEAD)
            var buffer = ByteBuffer(string: text)
            guard case .head(_, _, let bodyLength)? = try parser.next(from: &buffer) else { return nil }
            return .some(bodyLength)
        }
        #expect(try length("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n") == .some(12))
        #expect(try length("HTTP/1.1 304 Not Modified\r\nContent-Length: 900\r\n\r\n") == .some(0))
        #expect(try length("HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n", isHEAD: true) == .some(0))
        #expect(try length("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") == .some(nil))
        #expect(try length("HTTP/1.0 200 OK\r\n\r\n") == .some(nil))
    }

    @Test("bytes arriving one at a time, or in any split, parse the same as all at once")
    func splits() {
        let input = bytes(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX: y\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        )
        let whole = parseOurs(input).0
        #expect(whole?.body == bytes("hello"))
        for size in 1...input.count {
            #expect(parseOurs(input, chunkSize: size).0 == whole, "split every \(size) bytes")
        }
    }

    @Test(
        "responses two parsers could read differently are refused",
        arguments: [
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab",
            "HTTP/1.1 200 OK\r\nContent-Length: 2 \r\n\r\nab",
            "HTTP/1.1 200 OK\r\n Folded: x\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 O\u{1}K\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            "HTTP/1.1 200 OK\r\nContent-Le",
        ]
    )
    func refused(_ text: String) {
        let (response, _, failure) = parseOurs(bytes(text))
        #expect(response == nil)
        #expect(failure?.kind == .network)
    }

    @Test("a head over the limit is refused before its end arrives; bytes that answer no request are refused")
    func limits() throws {
        var parser = HTTPResponseParser(maximumHeadBytes: 64)
        parser.expectResponse(isHEAD: false)
        var buffer = ByteBuffer(string: "HTTP/1.1 200 OK\r\nX-Long: " + String(repeating: "a", count: 80))
        #expect(throws: HTTPParseFailure.self) { _ = try parser.next(from: &buffer) }

        var idle = HTTPResponseParser(maximumHeadBytes: 1024)
        var empty = ByteBuffer()
        #expect(try idle.next(from: &empty) == nil)
        #expect(try idle.finish() == nil)
        var unasked = ByteBuffer(string: "HTTP/1.1 200 OK\r\n\r\n")
        #expect(throws: HTTPParseFailure.self) { _ = try idle.next(from: &unasked) }
    }

    /// Differential test against NIO's llhttp-based decoder: thousands of mutations of valid responses.
    /// Whatever this parser reads as a complete response, llhttp must read the same way; this parser may
    /// refuse more than llhttp does, never less.
    @Test("never more lenient than llhttp: mutated responses parse the same or are refused")
    func differential() async throws {
        let seeds = [
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"42\"}",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=\"y z\"\r\nabcd\r\n0\r\nT: v\r\n\r\n",
            "HTTP/1.1 304 Not Modified\r\nETag: \"abc\"\r\nCache-Control: max-age=60\r\n\r\n",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close",
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        ].map(bytes)
        let alphabet = bytes("\r\n :\t\u{0}\u{7f}\u{80},;0123456789abcdefzAGHT/chunked\"")
        var random = SplitMix64(seed: 0x5D02)
        var accepted = 0
        for round in 0..<5000 {
            if round % 100 == 0 { await CPUBoundTest.yieldToOtherTests() }
            var input = seeds[Int(random.next() % UInt64(seeds.count))]
            random.mutate(&input, from: alphabet)
            guard let ours = parseOurs(input).0 else { continue }
            accepted += 1
            let nio = try parseWithNIO(input)
            #expect(
                nio == ours,
                "round \(round): \(String(decoding: input, as: UTF8.self).debugDescription)\nours \(ours)\nnio  \(String(describing: nio))"
            )
        }
        // The mutations must leave enough responses valid for the comparison to mean something.
        #expect(accepted > 500)
    }
}
