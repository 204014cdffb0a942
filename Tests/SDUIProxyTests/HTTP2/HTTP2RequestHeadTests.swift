import NIOHPACK
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The request head a HEADERS frame stands for: what routing and admission see of an HTTP/2 request.
@Suite("The HTTP/1.1 head of an HTTP/2 request")
struct HTTP2RequestHeadTests {
    private static func block(_ method: String, _ fields: [(String, String)] = []) -> HPACKHeaders {
        HPACKHeaders(
            [(":method", method), (":scheme", "https"), (":path", "/screens/a?x=1"), (":authority", "app.example")]
                + fields
        )
    }

    private static func head(_ block: HPACKHeaders, endStream: Bool = true) throws -> HTTPRequestHead {
        try HTTP2RequestHead.make(block, endStream: endStream).get()
    }

    @Test("the method, target and version come from the pseudo-headers, Host from :authority, fields in order")
    func head() throws {
        let head = try Self.head(Self.block("GET", [("accept", "application/json")]))
        #expect(head.method == .GET)
        #expect(head.uri == "/screens/a?x=1")
        #expect(head.version == HTTPVersion(major: 2, minor: 0))
        #expect(head.headers.map(\.name) == ["host", "accept"])
        #expect(head.headers.first(name: "host") == "app.example")
    }

    @Test("a Host field naming :authority's host is kept, not doubled; naming another is a malformed request")
    func host() throws {
        #expect(try Self.head(Self.block("GET", [("host", "APP.example")])).headers["host"] == ["APP.example"])
        let other = HTTP2RequestHead.make(Self.block("GET", [("host", "other.example")]), endStream: true)
        guard case .failure(.refused(let error)) = other else {
            Issue.record("two hosts are refused: \(other)")
            return
        }
        #expect(error.status == .badRequest)
    }

    @Test("RFC 9113 §8.2.3: cookie crumbs go to HTTP/1.1 as one field, joined with \"; \"")
    func cookies() throws {
        let head = try Self.head(Self.block("GET", [("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2")]))
        #expect(head.headers["cookie"] == ["a=1; b=2"])
    }

    @Test(
        "a body without content-length is chunked for the exchange, whatever the method; none declares 0 where one is expected"
    )
    func framing() throws {
        let streaming = try Self.head(Self.block("POST"), endStream: false)
        #expect(streaming.headers["transfer-encoding"] == ["chunked"])
        #expect(RequestExchange.bodyLength(of: streaming) == .unknown)
        let deleteWithBody = try Self.head(Self.block("DELETE"), endStream: false)
        #expect(RequestExchange.bodyLength(of: deleteWithBody) == .unknown, "a DELETE's body is not dropped")
        let empty = try Self.head(Self.block("POST"))
        #expect(empty.headers["content-length"] == ["0"])
        #expect(RequestExchange.bodyLength(of: empty) == .none)
        let declared = try Self.head(Self.block("PUT", [("content-length", "12")]), endStream: false)
        #expect(declared.headers["transfer-encoding"].isEmpty)
        #expect(RequestExchange.bodyLength(of: declared) == .declared(12))
        let get = try Self.head(Self.block("GET"))
        #expect(get.headers["transfer-encoding"].isEmpty && get.headers["content-length"].isEmpty)
    }

    @Test("a block without :method or :path is malformed; a CONNECT, well-formed without :path, is refused")
    func missingPseudoHeaders() {
        guard
            case .failure(.malformed) = HTTP2RequestHead.make(
                HPACKHeaders([(":method", "GET"), (":scheme", "https")]),
                endStream: true
            ),
            case .failure(.malformed) = HTTP2RequestHead.make(
                HPACKHeaders([(":path", "/"), (":scheme", "https")]),
                endStream: true
            ),
            case .failure(.refused(let error)) = HTTP2RequestHead.make(
                HPACKHeaders([(":method", "CONNECT"), (":authority", "backend:443")]),
                endStream: false
            )
        else {
            Issue.record("each is refused")
            return
        }
        #expect(error.status == .badRequest)
    }

    @Test("the block is checked on the same walk: a malformed field gives no head, and trailers are checked too")
    func malformed() {
        for fields in [[("Accept", "*/*")], [("x-note", "a\r\nb")], [("connection", "close")], [("te", "gzip")]] {
            guard case .failure(.malformed) = HTTP2RequestHead.make(Self.block("GET", fields), endStream: true) else {
                Issue.record("\(fields) is malformed")
                continue
            }
        }
        #expect(HTTP2RequestHead.violation(inTrailers: HPACKHeaders([("x-checksum", "abc")])) == nil)
        #expect(HTTP2RequestHead.violation(inTrailers: HPACKHeaders([(":path", "/")])) != nil)
    }
}
