import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("HTTPWireFormat request encoding")
struct HTTPWireFormatTests {
    @Test("a request is its line, its headers in order, a blank line and its body")
    func encodes() throws {
        let encoded = try HTTPWireFormat.encodeRequest(
            method: .POST,
            target: "/api/cart?x=1",
            headers: ["Host": "backend:8080", "Content-Length": "2", "beagle-platform": "IOS"],
            body: ByteBuffer(string: "{}")
        )
        #expect(
            String(buffer: encoded)
                == "POST /api/cart?x=1 HTTP/1.1\r\nHost: backend:8080\r\nContent-Length: 2\r\nbeagle-platform: IOS\r\n\r\n{}"
        )
    }

    @Test("a host given to the encoder is the one Host header, first, whatever the headers say")
    func host() throws {
        let encoded = try HTTPWireFormat.encodeRequest(
            method: .GET,
            target: "/screens/home",
            host: "backend:8080",
            headers: ["beagle-platform": "IOS", "HOST": "client.example", "Accept": "*/*", "host": "other"],
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
                headers: [:],
                body: nil
            )
        }
    }

    @Test(
        "what could end a line early, and so smuggle a second request, is refused before a byte is written",
        arguments: [
            ("/a b", "X", "y"), ("/a\r\nGET /b", "X", "y"), ("", "X", "y"), ("/a", "X", "y\r\nInjected: 1"),
            ("/a", "X\r\n", "y"), ("/a", "Bad Name", "y"), ("/a", "X", "y\u{0}"), ("/\u{e9}", "X", "y"),
        ]
    )
    func refuses(_ target: String, _ name: String, _ value: String) {
        #expect(throws: ProxyError.self) {
            _ = try HTTPWireFormat.encodeRequest(method: .GET, target: target, headers: [name: value], body: nil)
        }
    }
}
