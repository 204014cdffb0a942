import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A backend's head relayed from its bytes: the same lines, in the same order, as the collection a wire that
/// takes one is given, and as the path that filtered a collection wrote them.
@Suite("A backend's head relayed from its bytes")
struct RelayedResponseHeadTests {
    private static let reporting = CacheReporting(ProxyConfiguration().cache)

    private static let backend: HTTPHeaders = [
        "Content-Type": "application/json",
        "Connection": "keep-alive, X-Backend-Hop",
        "X-Backend-Hop": "1",
        "Keep-Alive": "timeout=5",
        "Surrogate-Key": "screens home",
        "x-request-id": "backend-id",
        "Content-Length": "12",
        "Set-Cookie": "a=1",
        "Set-Cookie": "b=2",
    ]

    private static func head(
        _ headers: HTTPHeaders = backend,
        requestID: String? = "client-id",
        annotated: Bool = true
    ) -> RelayedResponseHead {
        var annotation = reporting.forwarded(.bypass)
        annotation.status.forwardStatus = 200
        return RelayedResponseHead(
            status: .ok,
            fields: HTTPFieldLines(headers),
            clientFields: ClientFacingFields(hiddenField: "surrogate-key"),
            requestID: requestID,
            annotation: annotated ? annotation : nil
        )
    }

    private static func lines(of head: RelayedResponseHead) -> (text: String, hasContentLength: Bool) {
        var buffer = ByteBuffer()
        let hasContentLength = head.writeLines(into: &buffer)
        return (String(buffer: buffer), hasContentLength)
    }

    @Test(
        "hop-by-hop fields, those Connection names, the hidden field and a replaced id stay behind; the rest in order"
    )
    func kept() {
        let (text, hasContentLength) = Self.lines(of: Self.head())
        #expect(
            text == "Content-Type: application/json\r\nContent-Length: 12\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
                + "Via: 1.1 sdui-proxy\r\nX-Request-Id: client-id\r\nX-Cache: BYPASS\r\n"
                + "Cache-Status: sdui-proxy; fwd=bypass; fwd-status=200\r\n"
        )
        #expect(hasContentLength)
    }

    @Test("without an id of its own the backend's passes; without Content-Length the lines say so")
    func backendIDAndNoLength() {
        var headers = Self.backend
        headers.remove(name: "content-length")
        let (text, hasContentLength) = Self.lines(of: Self.head(headers, requestID: nil, annotated: false))
        #expect(text.contains("x-request-id: backend-id\r\n"))
        #expect(!text.contains("X-Request-Id") && !text.contains("Cache-Status"))
        #expect(!hasContentLength)
    }

    @Test("the hidden field goes in any letter case, found by its first eight bytes; names of its length stay")
    func hiddenByItsLead() {
        let clientFields = ClientFacingFields(hiddenField: "Surrogate-Key")
        #expect(clientFields.hiddenFieldLead != nil)
        let head = RelayedResponseHead(
            status: .ok,
            fields: HTTPFieldLines([
                "Last-Modified": "x", "SURROGATE-KEY": "a", "Accept-Ranges": "bytes", "surrogate-kez": "b",
                "xurrogate-key": "c", "surrogate-key": "d",
            ]),
            clientFields: clientFields,
            requestID: nil,
            annotation: nil
        )
        #expect(
            Self.lines(of: head).text
                == "Last-Modified: x\r\nAccept-Ranges: bytes\r\nsurrogate-kez: b\r\nxurrogate-key: c\r\n"
                + "Via: 1.1 sdui-proxy\r\n"
        )
    }

    @Test("an HTTP/1.1 connection holds the head with room for a small body behind it, not for a large one")
    func roomForASmallBody() throws {
        func heldHead(bodyLength: Int?) throws -> ByteBuffer {
            var writer = HTTP1ResponseWriter(requests: RequestTally(), buffers: ResponseBufferRecycler())
            writer.startRequest(isHead: false, accounting: nil)
            let head = RelayedResponseHead(
                status: .ok,
                fields: HTTPFieldLines(["Content-Length": "\(bodyLength ?? 0)"]),
                bodyLength: bodyLength,
                clientFields: ClientFacingFields(),
                requestID: nil,
                annotation: nil
            )
            writer.holdStreamedHead(head, cacheResult: nil, closesConnection: false, allocator: ByteBufferAllocator())
            let held = writer.takeHeldHead()
            return try #require(held)
        }
        // The first part is copied behind the head as it is: without room, the buffer grew and copied the head.
        let small = HTTP1ResponseWriter.partsCopiedBehindHead
        #expect(try heldHead(bodyLength: small).writableBytes >= small)
        #expect(try heldHead(bodyLength: 2_427).writableBytes >= 2_427)
        // A part too large to be copied goes out on its own: its head takes no more room than one without a body.
        #expect(try heldHead(bodyLength: small + 1).capacity == heldHead(bodyLength: nil).capacity)
    }

    /// For ASCII values; a wire that takes strings gets bytes beyond ASCII as UTF-8 decodes them.
    @Test("a wire that takes a collection gets the same fields in the same order as the collection path made them")
    func collection() {
        let relayed = Self.head()
        var written = ByteBuffer()
        HTTPWireFormat.writeHeaderLines(relayed.headers, into: &written)
        #expect(String(buffer: written) == Self.lines(of: relayed).text)
        // The collection path: the backend's end-to-end fields, then this hop's.
        var expected = UpstreamRequestBuilder.endToEndResponseHeaders(
            Self.backend,
            dropping: "surrogate-key",
            replaced: "x-request-id"
        )
        expected.add(name: "Via", value: CachedResponse.ownVia)
        expected.add(name: "X-Request-Id", value: "client-id")
        relayed.annotation?.add(to: &expected)
        #expect(relayed.headers.map { "\($0.name): \($0.value)" } == expected.map { "\($0.name): \($0.value)" })
    }

    @Test("a value's bytes beyond ASCII go out over HTTP/1.1 as the backend sent them, as stored answers do")
    func obsText() throws {
        var parser = HTTPResponseParser(maximumHeadBytes: 1024)
        parser.expectResponse(isHEAD: false)
        var bytes = ByteBuffer(string: "HTTP/1.1 200 OK\r\nX-Name: caf")
        bytes.writeInteger(UInt8(0xE9))
        bytes.writeString("\r\nContent-Length: 0\r\n\r\n")
        guard case .head(let head, _, _)? = try parser.next(from: &bytes) else {
            Issue.record("no head parsed")
            return
        }
        let relayed = RelayedResponseHead(
            status: .ok,
            fields: head.fields,
            clientFields: ClientFacingFields(),
            requestID: nil,
            annotation: nil
        )
        var written = ByteBuffer()
        #expect(relayed.writeLines(into: &written))
        #expect(Array(written.readableBytesView.prefix(14)) == Array("X-Name: caf".utf8) + [0xE9, 0x0D, 0x0A])
    }
}
