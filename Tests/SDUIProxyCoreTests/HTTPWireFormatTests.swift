import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("HTTPWireFormat request encoding")
struct HTTPWireFormatTests {
    @Test("a request line of any length is written whole, its space counted")
    func requestLineAtCapacity() throws {
        // The head is measured before it is written: lines of every length around the sizes an allocator rounds
        // to come out whole, and within the buffer.
        for count in 100...130 {
            let method = String(repeating: "A", count: count)
            let encoded = try HTTPWireFormat.encodeRequest(
                method: .RAW(value: method),
                target: "/a",
                fields: HTTPFieldLines(),
                body: nil
            )
            #expect(String(buffer: encoded) == "\(method) /a HTTP/1.1\r\n\r\n", "method of \(count) bytes")
            #expect(encoded.writerIndex <= encoded.capacity)
        }
    }

    @Test("a request is its line, its headers in order, a blank line and its body")
    func encodes() throws {
        let encoded = try HTTPWireFormat.encodeRequest(
            method: .POST,
            target: "/api/cart?x=1",
            fields: HTTPFieldLines(["Host": "backend:8080", "beagle-platform": "IOS"]),
            framing: .length(2),
            body: ByteBuffer(string: "{}")
        )
        #expect(
            String(buffer: encoded)
                == "POST /api/cart?x=1 HTTP/1.1\r\nHost: backend:8080\r\nbeagle-platform: IOS\r\nContent-Length: 2\r\n\r\n{}"
        )
    }

    @Test(
        "the framing is this hop's: the fields' own Content-Length and Transfer-Encoding give way to the framing given",
        arguments: [
            (HTTPWireFormat.RequestFraming.none, ""), (.length(0), "Content-Length: 0\r\n"),
            (.length(1_234_567), "Content-Length: 1234567\r\n"), (.chunked, "Transfer-Encoding: chunked\r\n"),
        ]
    )
    func framing(_ framing: HTTPWireFormat.RequestFraming, _ line: String) throws {
        let fields = HTTPFieldLines([
            "Content-Length": "99", "Accept": "*/*", "transfer-encoding": "gzip, chunked", "CONTENT-LENGTH": "7",
            "X-Content-Length": "5",
        ])
        let encoded = try HTTPWireFormat.encodeRequest(
            method: .PUT,
            target: "/a",
            fields: fields,
            framing: framing,
            body: nil
        )
        #expect(String(buffer: encoded) == "PUT /a HTTP/1.1\r\nAccept: */*\r\nX-Content-Length: 5\r\n\(line)\r\n")
    }

    @Test(
        "a body the backend could not find the end of, and a method that is not a token, are refused",
        arguments: [
            (HTTPMethod.POST, HTTPWireFormat.RequestFraming.none, "{}" as String?), (.POST, .length(3), "{}"),
            (.POST, .length(-1), nil), (.POST, .chunked, "{}"), (.RAW(value: "GET /b"), .none, nil),
            (.RAW(value: ""), .none, nil),
        ]
    )
    func refusesFraming(_ method: HTTPMethod, _ framing: HTTPWireFormat.RequestFraming, _ body: String?) {
        #expect(throws: ProxyError.self) {
            _ = try HTTPWireFormat.encodeRequest(
                method: method,
                target: "/a",
                fields: HTTPFieldLines(),
                framing: framing,
                body: body.map { ByteBuffer(string: $0) }
            )
        }
    }

    // The head is written into room measured beforehand; in the tests' debug builds a line past that room traps.
    @Test("fields removed or replaced are not written")
    func editedFields() throws {
        var fields = HTTPFieldLines(["X-Request-Id": "client", "Accept": "*/*", "tracestate": "a=1", "Via": "1.0 x"])
        fields.replaceOrAdd(name: "x-request-id", value: String(repeating: "r", count: 300))
        fields.remove(name: "TRACESTATE")
        fields.add(name: "traceparent", value: "00-1-2-01")
        let encoded = try HTTPWireFormat.encodeRequest(method: .GET, target: "/a", fields: fields, body: nil)
        #expect(
            String(buffer: encoded)
                == "GET /a HTTP/1.1\r\nAccept: */*\r\nVia: 1.0 x\r\nx-request-id: \(String(repeating: "r", count: 300))\r\n"
                + "traceparent: 00-1-2-01\r\n\r\n"
        )
    }

    @Test("a header line is its name, a colon and a space, its value and CRLF, whatever the strings' sizes")
    func headerLines() {
        let long = String(repeating: "v", count: 3000)
        let cases: [(String, String)] = [
            ("A", ""), ("ETag", #""0123456789abcdef""#), ("x", "fifteen-bytes!!"),
            ("sixteen-bytes-xx", "sixteen-bytes-xx"),
            ("X-Long", long), (long, "a"), ("X-UTF8", "caf\u{E9} \u{1F600}"),
            ("X-Substring", String("..trimmed..".dropFirst(2).dropLast(2))),
        ]
        for capacity in [0, 16, 8192] {
            var buffer = ByteBufferAllocator().buffer(capacity: capacity)
            buffer.writeString(">")
            var expected = ">"
            for (name, value) in cases {
                HTTPWireFormat.writeHeaderLine(name, value, into: &buffer)
                expected += "\(name): \(value)\r\n"
            }
            #expect(String(buffer: buffer) == expected)
        }
    }

    @Test("a host given to the encoder is the one Host header, first, whatever the headers say")
    func host() throws {
        let encoded = try HTTPWireFormat.encodeRequest(
            method: .GET,
            target: "/screens/home",
            host: "backend:8080",
            fields: HTTPFieldLines([
                "beagle-platform": "IOS", "HOST": "client.example", "Accept": "*/*", "host": "other",
            ]),
            body: nil
        )
        #expect(
            String(buffer: encoded)
                == "GET /screens/home HTTP/1.1\r\nHost: backend:8080\r\nbeagle-platform: IOS\r\nAccept: */*\r\n\r\n"
        )
        #expect(throws: ProxyError.self) {
            _ = try HTTPWireFormat.encodeRequest(
                method: .GET,
                target: "/a",
                host: "b\r\nInjected: 1",
                fields: HTTPFieldLines(),
                body: nil
            )
        }
    }

    @Test(
        "what could end a line early, and so smuggle a second request, is refused before a byte is written",
        arguments: [
            ("/a b", "X", "y"), ("/a\r\nGET /b", "X", "y"), ("", "X", "y"), ("/a", "X", "y\r\nInjected: 1"),
            ("/a", "X\r\n", "y"), ("/a", "Bad Name", "y"), ("/a", "X", "y\u{0}"), ("/\u{e9}", "X", "y"),
            ("/a", "", "y"),
            ("/a", "X", "y\u{7F}"),
        ]
    )
    func refuses(_ target: String, _ name: String, _ value: String) {
        #expect(throws: ProxyError.self) {
            _ = try HTTPWireFormat.encodeRequest(
                method: .GET,
                target: target,
                fields: HTTPFieldLines([name: value]),
                body: nil
            )
        }
    }
}
