import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

/// The method and field names a request head repeats, handed out as strings made once
/// (``CommonRequestSpellings``), are what making them from the bytes gives, for every spelling.
@Suite("Common request spellings")
struct CommonRequestSpellingsTests {
    private static let knownNames = [
        "Host", "Accept", "Cookie", "Origin", "Referer", "User-Agent", "Connection", "Content-Type", "Cache-Control",
        "Authorization", "Content-Length", "Accept-Encoding", "Accept-Language",
    ]

    private static func bytes<Result>(_ text: String, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        Array(text.utf8).withUnsafeBytes(body)
    }

    @Test("each known name is found in its exact spelling and made from bytes in any other")
    func fieldNames() {
        for name in Self.knownNames {
            #expect(Self.bytes(name) { CommonRequestSpellings.knownFieldName($0) } == name)
            for other in [name.lowercased(), name.uppercased(), String(name.dropLast()), name + "s"] where other != name
            {
                #expect(Self.bytes(other) { CommonRequestSpellings.knownFieldName($0) } == nil, "\(other)")
                #expect(Self.bytes(other) { CommonRequestSpellings.fieldName($0) } == other)
            }
        }
        // Names of a known length that are none of them.
        for name in ["Date", "X-Seen", "Expires", "beagle-hash", "X-Request-Id", "If-None-Match", "Accept-Charsets"] {
            #expect(Self.bytes(name) { CommonRequestSpellings.knownFieldName($0) } == nil, "\(name)")
            #expect(Self.bytes(name) { CommonRequestSpellings.fieldName($0) } == name)
        }
        #expect(Self.bytes("") { CommonRequestSpellings.fieldName($0) } == "")
    }

    @Test("a method is the one its bytes name, known or not")
    func methods() {
        for method in ["GET", "PUT", "HEAD", "POST", "DELETE", "PATCH", "OPTIONS", "get", "Post", "GOT", "HEAR", "X"] {
            let parsed = Self.bytes(method) { CommonRequestSpellings.method($0) }
            #expect(parsed == HTTPMethod(rawValue: method), "\(method)")
            #expect(parsed.rawValue == method)
        }
    }

    @Test("a parsed request's head holds the names and method as sent")
    func parsedHead() throws {
        var parser = HTTPRequestParser(maximumHeadBytes: 8192)
        var buffer = ByteBuffer(
            string:
                "POST /a HTTP/1.1\r\nHost: x\r\nhost-name: y\r\nUser-Agent: t\r\nACCEPT: */*\r\nContent-Length: 0\r\n\r\n"
        )
        guard case .head(let head) = try parser.next(from: &buffer) else {
            Issue.record("no head")
            return
        }
        #expect(head.method == .POST)
        #expect(head.headers.map(\.name) == ["Host", "host-name", "User-Agent", "ACCEPT", "Content-Length"])
        #expect(head.headers.map(\.value) == ["x", "y", "t", "*/*", "0"])
    }
}
