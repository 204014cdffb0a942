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

    @Test("a table finds a block again by its bytes; other bytes, or a block over the bound, make another")
    func table() {
        let table = CommonFieldLines.Table(slotCount: 8)
        let lines = Array("Server: a\r\nContent-Type: application/json\r\n".utf8)
        let first = lines.withUnsafeBytes { table.intern($0) }
        let again = lines.withUnsafeBytes { table.intern($0) }
        #expect(first === again)
        #expect(first.lines == lines)
        let other = Array("Server: b\r\n".utf8).withUnsafeBytes { table.intern($0) }
        #expect(other !== first && other.lines == Array("Server: b\r\n".utf8))
        // However many blocks come after, each keeps its bytes: the table never frees what an entry holds.
        for index in 0..<100 { _ = Array("Server: \(index)\r\n".utf8).withUnsafeBytes { table.intern($0) } }
        #expect(first.lines == lines)
        let large = Array("X-Large: \(String(repeating: "v", count: CommonFieldLines.maximumSharedBytes))\r\n".utf8)
        let kept = large.withUnsafeBytes { CommonFieldLines.interned($0) }
        #expect(kept !== large.withUnsafeBytes { CommonFieldLines.interned($0) })
        #expect(kept.lines == large)
    }

    @Test("lines of the same length that differ in their last byte are not taken for each other in one slot")
    func sameLengthOtherBytes() {
        let table = CommonFieldLines.Table(slotCount: 1)
        let first = Array("Server: a\r\n".utf8).withUnsafeBytes { table.intern($0) }
        let other = Array("Server: b\r\n".utf8).withUnsafeBytes { table.intern($0) }
        #expect(other !== first && other.lines == Array("Server: b\r\n".utf8))
        let again = Array("Server: b\r\n".utf8).withUnsafeBytes { table.intern($0) }
        #expect(again === other)
    }

    @Test("an entry keeps its times with its forms and the rest in its block; each entry counts its block")
    func entryHead() {
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
        let common = "Server: lines-test-shared\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
        #expect(String(decoding: first.commonLines.lines, as: UTF8.self) == common)
        #expect(second.commonLines.lines == first.commonLines.lines)
        // Each head is whole: the shared lines, then the entry's own.
        #expect(
            String(decoding: second.encodedHead(), as: UTF8.self)
                == common + "Date: Sun, 22 Nov 2026 04:00:00 GMT\r\nLast-Modified: Sat, 21 Nov 2026 04:00:00 GMT\r\n"
                + "ETag: \"b\"\r\nVia: 1.1 sdui-proxy\r\nContent-Length: 7\r\n"
        )
        #expect(second.lastModified == "Sat, 21 Nov 2026 04:00:00 GMT")
        // Both count the block, shared or not; the second keeps one line more of its own.
        let lastModifiedLine = "Last-Modified: Sat, 21 Nov 2026 04:00:00 GMT\r\n".utf8.count
        #expect(second.byteCost - first.byteCost == lastModifiedLine)
        #expect(first.byteCost > first.commonLines.lines.count + first.identity.storedLines.count + 7)
    }

    @Test("other lines make another block, and an entry's head stays its own")
    func distinct() {
        let one = Self.entry(Self.backend("one"))
        let other = Self.entry(Self.backend("other"))
        #expect(one.commonLines !== other.commonLines)
        #expect(String(decoding: other.commonLines.lines, as: UTF8.self).hasPrefix("Server: lines-test-other\r\n"))
        #expect(String(decoding: one.encodedHead(), as: UTF8.self).hasPrefix("Server: lines-test-one\r\n"))
        #expect(one.headers.first(name: "server") == "lines-test-one")
    }

    @Test("a response with no lines to share holds the empty block")
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
