import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("A backend response's fields, read in place")
struct HTTPFieldLinesTests {
    /// The fields of `head` (status line, header lines, blank line) as the backend client's parser reads them.
    private func fields(_ head: String) throws -> HTTPFieldLines {
        var parser = HTTPResponseParser(maximumHeadBytes: 4096)
        parser.expectResponse(isHEAD: false)
        var buffer = ByteBuffer(string: head)
        guard case .head(let parsed, _, _)? = try parser.next(from: &buffer) else {
            Issue.record("no head in \(head.debugDescription)")
            return HTTPFieldLines()
        }
        return parsed.fields
    }

    /// Every value of the fields named `name`, one per field line.
    private func lines(of name: StaticString, in fields: HTTPFieldLines) -> [String] {
        var values: [String] = []
        fields.forEachValue(of: name) { values.append(String(decoding: $0, as: UTF8.self)) }
        return values
    }

    private static let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDATE: Sun, 22 Nov 2026 10:00:00 GMT\r\n"
        + "cache-control: max-age=60\r\nX-Empty:\r\nCache-Control:  public \r\nVary: Accept, Platform\r\n"
        + "Content-Length: 0\r\n\r\n"

    @Test("names match in any letter case; values come without the whitespace around them, in order")
    func lookups() throws {
        let fields = try fields(Self.head)
        #expect(fields.count == 7)
        #expect(fields.first("date") == "Sun, 22 Nov 2026 10:00:00 GMT")
        #expect(lines(of: "cache-control", in: fields) == ["max-age=60", "public"])
        #expect(fields.contains("x-empty") && fields.first("x-empty") == "")
        #expect(!fields.contains("etag") && fields.first("etag") == nil && lines(of: "etag", in: fields).isEmpty)
        #expect(fields.withFirstValue(of: "content-length") { $0.count } == 1)
        #expect(lines(of: "vary", in: fields) == ["Accept, Platform"])
        var varyMembers: [String] = []
        fields.forEachListMember(of: "vary") { varyMembers.append(String(decoding: $0, as: UTF8.self)) }
        #expect(varyMembers == ["Accept", "Platform"])
    }

    @Test("as a collection they are the headers as sent, names spelled as sent, and back again")
    func collection() throws {
        let fields = try fields(Self.head)
        let headers = fields.headers
        #expect(
            headers.map { "\($0.name)=\($0.value)" } == [
                "Content-Type=application/json", "DATE=Sun, 22 Nov 2026 10:00:00 GMT", "cache-control=max-age=60",
                "X-Empty=", "Cache-Control=public", "Vary=Accept, Platform", "Content-Length=0",
            ]
        )
        let again = HTTPFieldLines(headers)
        #expect(again.headers.map { "\($0.name)=\($0.value)" } == headers.map { "\($0.name)=\($0.value)" })
        #expect(lines(of: "cache-control", in: again) == ["max-age=60", "public"])
    }

    @Test("freshness, directives and dates are read from the fields as from the headers")
    func readersAgree() throws {
        let fields = try fields(
            "HTTP/1.1 200 OK\r\nDate: Sun, 22 Nov 2026 10:00:00 GMT\r\nExpires: Sun, 22 Nov 2026 10:05:00 GMT\r\n"
                + "Age: 7\r\nCache-Control: stale-while-revalidate=30\r\n\r\n"
        )
        let directives = CacheControl(fields: fields)
        #expect(directives.staleWhileRevalidate == 30 && directives.maxAge == nil)
        #expect(FreshnessPolicy.explicitLifetime(cacheControl: directives, fields: fields) == 300)
        let date = try #require(HTTPDate.parse("Sun, 22 Nov 2026 10:00:00 GMT"))
        // Responded 2 s after the request, at the date it states: the age it carries plus the delay.
        #expect(FreshnessPolicy.initialAge(fields: fields, requestTime: date - 2, responseTime: date) == 9)
        let twice = try self.fields("HTTP/1.1 200 OK\r\nExpires: 0\r\nExpires: 1\r\n\r\n")
        #expect(FreshnessPolicy.explicitLifetime(cacheControl: CacheControl(), fields: twice) == 0)
        #expect(FreshnessPolicy.explicitLifetime(cacheControl: CacheControl(), fields: HTTPFieldLines()) == nil)
    }

    @Test("an entry made from the fields is the entry made from the same headers, byte for byte")
    func entryFromFields() throws {
        let fields = try fields(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nETag: \"v1\"\r\nAge: 3\r\n"
                + "Last-Modified: Sun, 22 Nov 2026 09:00:00 GMT\r\nSurrogate-Key: a b,c\r\n"
                + "Cache-Control: max-age=5, stale-if-error=9\r\nContent-Length: 2\r\n\r\n"
        )
        let metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 5)
        let body = ByteBuffer(string: "{}")
        let fromFields = CachedResponse(status: .ok, fields: fields, body: body, metadata: metadata, endToEndOnly: true)
        let fromHeaders = CachedResponse(
            status: .ok,
            headers: fields.headers,
            body: body,
            metadata: metadata,
            endToEndOnly: true
        )
        for entry in [fromFields, fromHeaders] {
            #expect(
                String(decoding: entry.encodedHead(), as: UTF8.self)
                    == "Surrogate-Key: a b,c\r\nCache-Control: max-age=5, stale-if-error=9\r\n"
                    + "Last-Modified: Sun, 22 Nov 2026 09:00:00 GMT\r\n"
                    + "ETag: \"v1\"\r\nVia: 1.1 sdui-proxy\r\n"
                    + "Content-Length: 2\r\n"
            )
            #expect(entry.upstreamETag == "\"v1\"" && entry.lastModified == "Sun, 22 Nov 2026 09:00:00 GMT")
            #expect(entry.tags == ["a", "b", "c"] && entry.staleIfError == 9)
        }
    }
}
