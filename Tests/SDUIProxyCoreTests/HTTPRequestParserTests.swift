import NIOCore
import NIOEmbedded
import NIOHTTP1
import SDUIProxyCore
import Testing

/// What a parser made of some bytes: the complete requests it read, and whether it refused the rest.
private struct Parsed: Equatable, CustomStringConvertible {
    struct Request: Equatable {
        var method: String
        var uri: String
        var version: String
        var headers: [String]
        var body: [UInt8]
    }

    var requests: [Request] = []
    /// Whether each request keeps its connection open, as its parser judged it.
    var keepAlive: [Bool] = []
    var failed = false

    var description: String {
        requests.map { "\($0.method) \($0.uri) \($0.version) \($0.headers) body \($0.body.count)" }.joined(
            separator: " | "
        ) + (failed ? " | FAILED" : "")
    }

    /// Collects parts into requests; a part out of order is a failure of the test, not of the input.
    mutating func add(_ part: HTTPServerRequestPart) {
        switch part {
        case .head(let head):
            requests.append(
                Request(
                    method: head.method.rawValue,
                    uri: head.uri,
                    version: "\(head.version)",
                    // Optional whitespace around a value is not part of it (RFC 9110 section 5.5); llhttp keeps
                    // it at the end, this parser does not.
                    headers: head.headers.map { "\($0.name): \($0.value.trimmingWhitespace())" },
                    body: []
                )
            )
            keepAlive.append(head.isKeepAlive)
            open = true
        case .body(let buffer):
            #expect(open, "a body part outside a request")
            requests[requests.count - 1].body += buffer.readableBytesView
        case .end:
            #expect(open, "an end outside a request")
            open = false
        }
    }

    /// Drops a request whose end did not arrive: only complete requests are compared.
    mutating func dropIncomplete() {
        if open {
            requests.removeLast()
            keepAlive.removeLast()
            open = false
        }
    }

    private var open = false

    static func == (lhs: Parsed, rhs: Parsed) -> Bool {
        lhs.requests == rhs.requests && lhs.failed == rhs.failed
    }
}

/// Runs `bytes` through ``HTTPRequestParser``, `chunkSize` bytes at a time.
private func parseOurs(
    _ bytes: [UInt8],
    chunkSize: Int = .max,
    maximumHeadBytes: Int = 16 << 10
) -> (
    Parsed, HTTPRequestParser.Failure?
) {
    var parser = HTTPRequestParser(maximumHeadBytes: maximumHeadBytes)
    var parsed = Parsed()
    var buffer = ByteBuffer()
    var offset = 0
    while offset < bytes.count {
        let end = min(bytes.count, offset + chunkSize)
        buffer.writeBytes(bytes[offset..<end])
        offset = end
        do {
            while let part = try parser.next(from: &buffer) { parsed.add(part) }
        } catch {
            parsed.failed = true
            parsed.dropIncomplete()
            return (parsed, error)
        }
    }
    parsed.dropIncomplete()
    return (parsed, nil)
}

/// Runs `bytes` through NIO's llhttp-based `HTTPRequestDecoder`.
private func parseWithNIO(_ bytes: [UInt8]) throws -> Parsed {
    let channel = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
    var parsed = Parsed()
    do {
        try channel.writeInbound(ByteBuffer(bytes: bytes))
    } catch {
        parsed.failed = true
    }
    while let part = try channel.readInbound(as: HTTPServerRequestPart.self) { parsed.add(part) }
    parsed.dropIncomplete()
    _ = try? channel.finish()
    return parsed
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("HTTPRequestParser")
struct HTTPRequestParserTests {
    @Test("a GET, pipelined requests, a Content-Length body and a chunked body with extensions and trailers")
    func wellFormed() throws {
        let text =
            "GET /screens/home?x=1 HTTP/1.1\r\nHost: proxy\r\nbeagle-platform:  IOS \t\r\n\r\n"
            + "POST /api HTTP/1.1\r\nHost: proxy\r\nContent-Length: 5\r\n\r\nhello"
            + "PUT /up HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
            + "3;name=value\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
            + "HEAD /h HTTP/1.0\r\n\r\n"
        let (parsed, failure) = parseOurs(bytes(text))
        #expect(failure == nil)
        #expect(parsed.requests.map(\.method) == ["GET", "POST", "PUT", "HEAD"])
        #expect(parsed.requests[0].uri == "/screens/home?x=1")
        #expect(parsed.requests[0].headers == ["Host: proxy", "beagle-platform: IOS"])
        #expect(parsed.requests[1].body == bytes("hello"))
        #expect(parsed.requests[2].body == bytes("abc0123456789"))
        #expect(parsed.requests[3].version == "HTTP/1.0")
        let nio = try parseWithNIO(bytes(text))
        #expect(nio == parsed, "ours \(parsed)\nnio  \(nio)")
    }

    @Test("bytes arriving one at a time, or in any split, parse the same as all at once")
    func splits() {
        let text =
            "GET /a HTTP/1.1\r\nHost: h\r\n\r\nPOST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz"
            + "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        let whole = parseOurs(bytes(text)).0
        #expect(whole.requests.count == 3)
        for chunkSize in [1, 2, 3, 5, 7, 13, 64] {
            #expect(parseOurs(bytes(text), chunkSize: chunkSize).0 == whole, "chunks of \(chunkSize)")
        }
    }

    @Test(
        "ambiguous or malformed input is refused",
        arguments: [
            "GET / HTTP/1.1\r\nHost: h\r\n folded: value\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : h\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n",
            "GET / HTTP/1.1\r\nX: a\u{1}b\r\n\r\n",
            "GET /a b HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
            "GET / http/1.1\r\nHost: h\r\n\r\n",
            " GET / HTTP/1.1\r\nHost: h\r\n\r\n",
            "G(T / HTTP/1.1\r\nHost: h\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\nhello",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhello",
            "POST / HTTP/1.1\r\nContent-Length: 5 \r\n\r\nhello",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nhi\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2;\r\nhi\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nno colon\r\n\r\n",
            "GET screens/home HTTP/1.1\r\nHost: h\r\n\r\n",
        ]
    )
    func refused(_ text: String) {
        let (parsed, failure) = parseOurs(bytes(text))
        #expect(failure?.kind == .badRequest, "\(parsed)")
        #expect(parsed.requests.isEmpty)
    }

    @Test(
        "RFC 9110 §9.1: any token is a method, kept exactly as received",
        arguments: ["BREW", "M-SEARCH", "get", "PROPFIND", "X.custom_1~"]
    )
    func extensionMethods(method: String) {
        let (parsed, failure) = parseOurs(bytes("\(method) /pot HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"))
        #expect(failure == nil)
        #expect(parsed.requests.map(\.method) == [method])
        #expect(parsed.requests.first?.body == bytes("hi"))
    }

    @Test("a head over the limit is a 431 before its end arrives; a long chunk line is refused")
    func limits() {
        let long = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 300)
        #expect(parseOurs(bytes(long), maximumHeadBytes: 256).1?.kind == .headersTooLarge)
        #expect(parseOurs(bytes(long + "\r\n\r\n"), maximumHeadBytes: 256).1?.kind == .headersTooLarge)
        #expect(parseOurs(bytes(long + "\r\n\r\n"), maximumHeadBytes: 512).1 == nil)

        let chunkLine =
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;"
            + String(repeating: "e", count: HTTPRequestParser.maximumChunkLineBytes)
        #expect(parseOurs(bytes(chunkLine)).1?.kind == .badRequest)
    }

    @Test("a connection may end between requests, not inside one")
    func endOfInput() throws {
        var parser = HTTPRequestParser(maximumHeadBytes: 1024)
        var buffer = ByteBuffer(string: "GET / HTTP/1.1\r\nHost: h\r\n\r\nGET /next HTTP/1.1\r\n")
        #expect(try parser.next(from: &buffer).map { if case .head = $0 { true } else { false } } == true)
        #expect(try parser.next(from: &buffer).map { if case .end = $0 { true } else { false } } == true)
        #expect(try parser.next(from: &buffer) == nil)
        #expect(throws: HTTPRequestParser.Failure.self) { try parser.finish() }

        var idle = HTTPRequestParser(maximumHeadBytes: 1024)
        var empty = ByteBuffer()
        #expect(try idle.next(from: &empty) == nil)
        try idle.finish()
    }

    /// Differential test against NIO's llhttp-based decoder: thousands of mutations of valid requests. Whatever
    /// this parser accepts, llhttp must read the same way (the same requests, heads and bodies); this parser may
    /// refuse more than llhttp does, never less.
    @Test("never more lenient than llhttp: mutated requests parse the same or are refused")
    func differential() async throws {
        let seeds = [
            "GET /screens/home HTTP/1.1\r\nHost: proxy\r\nbeagle-platform: IOS\r\n\r\n",
            "POST /api/cart HTTP/1.1\r\nHost: proxy\r\nContent-Length: 11\r\n\r\n{\"id\":\"42\"}",
            "PUT /x HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\nT: v\r\n\r\n",
            "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.1\r\nHost: p\r\n\r\n",
            "POST /y HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n2;a=b;c=\"d e\"\r\nhi\r\n0\r\n\r\n",
        ].map(bytes)
        let alphabet = bytes("\r\n :\t\u{0}\u{7f}\u{80},;0123456789abcdefzAGT/chunked\"")
        var random = SplitMix64(seed: 0x5D01)
        var accepted = 0
        for round in 0..<5000 {
            if round % 100 == 0 { await CPUBoundTest.yieldToOtherTests() }
            var input = seeds[Int(random.next() % UInt64(seeds.count))]
            random.mutate(&input, from: alphabet)
            // Requests read before a refusal count too: they were already answered. The proxy closes the
            // connection after a request that is not keep-alive, so what follows it is never read.
            // llhttp keeps whitespace after a value, so it may judge `Connection: keep-alive\t` as closing where
            // this parser does not: compare up to where either side stops reading.
            // llhttp refuses methods it does not know, which RFC 9110 section 9.1 allows: compare up to the first.
            let (ours, _) = parseOurs(input)
            guard !ours.requests.isEmpty else { continue }
            accepted += 1
            let nio = try parseWithNIO(input)
            let closing = [ours.keepAlive, nio.keepAlive].compactMap { $0.firstIndex(of: false).map { $0 + 1 } }
            let unknownMethod = ours.requests.firstIndex { request in
                if case .RAW = HTTPMethod(rawValue: request.method) { true } else { false }
            }
            let compared = min(ours.requests.count, closing.min() ?? .max, unknownMethod ?? .max)
            #expect(
                Array(nio.requests.prefix(compared)) == Array(ours.requests.prefix(compared)),
                "round \(round): \(String(decoding: input, as: UTF8.self).debugDescription)\nours \(ours)\nnio  \(nio)"
            )
        }
        // The mutations must leave enough requests valid for the comparison to mean something.
        #expect(accepted > 500)
    }
}

extension HTTPRequestParserTests {
    @Test("whether a head leaves the connection open is read as it is parsed, as its fields would say it")
    func keepAliveReadWithTheHead() throws {
        let connections: [[String]] = [
            [], ["close"], ["keep-alive"], ["Keep-Alive"], ["CLOSE"], ["x-trace, close"], ["keep-alive, keep-alive"],
            ["keep-alive", "keep-alive"], ["x-trace"], ["upgrade", "close"], [" close "], ["close, keep-alive"],
        ]
        var checked = 0
        for version in ["HTTP/1.1", "HTTP/1.0"] {
            for values in connections {
                var parser = HTTPRequestParser(maximumHeadBytes: 8192)
                // The name in the spellings clients use, which both readings compare ignoring case.
                let names = ["Connection", "connection", "CONNECTION"]
                let lines = values.enumerated().map { "\(names[$0.offset % 3]): \($0.element)\r\n" }.joined()
                var buffer = ByteBuffer(string: "GET /a \(version)\r\nHost: x\r\n\(lines)\r\n")
                guard case .head(let head) = try parser.next(from: &buffer) else {
                    Issue.record("no head for \(values)")
                    continue
                }
                #expect(parser.headKeepsConnectionOpen == head.keepsConnectionOpen, "\(version) \(values)")
                checked += head.keepsConnectionOpen ? 1 : 0
            }
        }
        // Both answers are among them: HTTP/1.1 without close, and HTTP/1.0 with one keep-alive.
        #expect(checked > 0 && checked < 2 * connections.count)
    }

    @Test("pipelined heads in one buffer: after each head, the answer is that head's")
    func keepAliveOfPipelinedHeads() throws {
        var parser = HTTPRequestParser(maximumHeadBytes: 8192)
        var buffer = ByteBuffer(
            string: "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                + "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
                + "GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                + "GET /d HTTP/1.0\r\n\r\n"
        )
        var answers: [String: Bool] = [:]
        while let part = try parser.next(from: &buffer) {
            guard case .head(let head) = part else { continue }
            #expect(parser.headKeepsConnectionOpen == head.keepsConnectionOpen, "\(head.uri)")
            answers[head.uri] = parser.headKeepsConnectionOpen
        }
        #expect(answers == ["/a": false, "/b": true, "/c": true, "/d": false])
    }
}
