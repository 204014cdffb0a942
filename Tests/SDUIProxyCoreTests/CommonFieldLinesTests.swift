import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("Lines entries share")
struct CommonFieldLinesTests {
    private static func entry(_ headers: [(String, String)], body: String = "{}") -> CachedResponse {
        CachedResponse(
            status: .ok,
            headers: HTTPHeaders(headers),
            body: ByteBuffer(string: body),
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
    }

    /// Lines no other test stores, so that the table's slot for them is this test's.
    private static func backend(_ name: String) -> [(String, String)] {
        [("Server", "lines-test-\(name)"), ("Content-Type", "application/json"), ("Cache-Control", "max-age=60")]
    }

    @Test("entries whose lines differ only in their times and tags share one block, and the first pays for it")
    func shared() {
        let first = Self.entry(
            Self.backend("shared") + [("Date", "Sun, 22 Nov 2026 03:00:00 GMT"), ("ETag", #""a""#)],
            body: #"{"a":1}"#
        )
        let second = Self.entry(
            Self.backend("shared") + [
                ("Date", "Sun, 22 Nov 2026 04:00:00 GMT"), ("Last-Modified", "Sat, 21 Nov 2026 04:00:00 GMT"),
                ("ETag", #""b""#),
            ],
            body: #"{"b":2}"#
        )
        #expect(first.commonLines === second.commonLines)
        #expect(
            String(decoding: first.commonLines.lines, as: UTF8.self)
                == "Server: lines-test-shared\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
        )
        // Each head is whole: the shared lines, then the entry's own.
        #expect(
            String(decoding: second.encodedHead(), as: UTF8.self)
                == String(decoding: first.commonLines.lines, as: UTF8.self)
                + "Date: Sun, 22 Nov 2026 04:00:00 GMT\r\nLast-Modified: Sat, 21 Nov 2026 04:00:00 GMT\r\n"
                + "ETag: \"b\"\r\nVia: 1.1 sdui-proxy\r\nContent-Length: 7\r\n"
        )
        #expect(second.lastModified == "Sat, 21 Nov 2026 04:00:00 GMT")
        // The block is counted once, by the entry that made it; the second keeps one line more of its own.
        let lastModifiedLine = "Last-Modified: Sat, 21 Nov 2026 04:00:00 GMT\r\n".utf8.count
        #expect(first.byteCost - second.byteCost == first.commonLines.byteCost - lastModifiedLine)
    }

    @Test("other lines make another block, and an entry keeps its own when the table's slot moves on")
    func distinct() {
        let one = Self.entry(Self.backend("one"))
        let other = Self.entry(Self.backend("other"))
        #expect(one.commonLines !== other.commonLines)
        #expect(String(decoding: other.commonLines.lines, as: UTF8.self).hasPrefix("Server: lines-test-other\r\n"))
        // However many blocks come after, each entry's head stays its own.
        for index in 0..<2_000 { _ = Self.entry(Self.backend("churn-\(index)")) }
        #expect(String(decoding: one.encodedHead(), as: UTF8.self).hasPrefix("Server: lines-test-one\r\n"))
        #expect(one.headers.first(name: "server") == "lines-test-one")
    }

    @Test("a response with no lines to share holds the empty block, and pays for none")
    func none() {
        let bare = Self.entry([("Date", "Sun, 22 Nov 2026 03:00:00 GMT")])
        #expect(bare.commonLines === CommonFieldLines.none)
        #expect(
            String(decoding: bare.encodedHead(), as: UTF8.self)
                == "Date: Sun, 22 Nov 2026 03:00:00 GMT\r\nETag: \(bare.etag)\r\nVia: 1.1 sdui-proxy\r\n"
                + "Content-Length: 2\r\n"
        )
    }

    @Test("the lines an entry keeps as its own are its times and its cookie")
    func ownLines() {
        for name in ["Date", "last-modified", "EXPIRES", "Set-Cookie"] {
            #expect(
                name.utf8.withContiguousStorageIfAvailable { CommonFieldLines.isOwn(UnsafeRawBufferPointer($0)) }
                    == true
            )
        }
        for name in ["Server", "Content-Type", "Cache-Control", "Vary", "Dates"] {
            #expect(
                name.utf8.withContiguousStorageIfAvailable { CommonFieldLines.isOwn(UnsafeRawBufferPointer($0)) }
                    == false
            )
        }
    }
}
