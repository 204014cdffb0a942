import NIOHTTP1
import SDUIProxyCore
import Testing

/// A `Range` on a stored 200 (RFC 9110 section 14), decided directly.
@Suite struct RangeRequestTests {
    private static func decide(
        _ range: String?,
        ifRange: String? = nil,
        length: Int = 100,
        etag: String = "\"v1\"",
        lastModified: String? = nil,
        date: String? = nil
    ) -> RangeRequest.Decision {
        var headers = HTTPHeaders()
        if let range { headers.add(name: "Range", value: range) }
        if let ifRange { headers.add(name: "If-Range", value: ifRange) }
        return RangeRequest.decide(headers: headers, length: length, etag: etag, lastModified: lastModified) { date }
    }

    @Test(
        "RFC 9110 §14.1.2: one bytes range, in any of its three forms, clipped to the representation",
        arguments: [
            ("bytes=0-9", RangeRequest.Decision.part(0...9)),
            ("bytes=90-", .part(90...99)),
            ("bytes=-10", .part(90...99)),
            ("bytes=-1000", .part(0...99)),
            ("bytes=95-1000", .part(95...99)),
            ("BYTES=0-0", .part(0...0)),
            ("bytes=0-99999999999999999999999", .part(0...99)),
            ("bytes=100-", .unsatisfiable),
            ("bytes=100-200", .unsatisfiable),
            ("bytes=-0", .unsatisfiable),
            ("bytes=0-1,5-6", .whole),
            ("bytes=0-1,", .whole),
            ("items=0-9", .whole),
            ("bytes=9-0", .whole),
            ("bytes=a-9", .whole),
            ("bytes = 0-9", .whole),
            ("bytes=0 -9", .whole),
            ("bytes=", .whole),
            ("bytes=-", .whole),
        ]
    )
    func ranges(range: String, expected: RangeRequest.Decision) {
        #expect(Self.decide(range) == expected, "\(range)")
    }

    @Test("an empty representation satisfies no range; no Range, or two lines of it, is the whole")
    func edges() {
        #expect(Self.decide("bytes=0-", length: 0) == .unsatisfiable)
        #expect(Self.decide(nil) == .whole)
        var twoLines = HTTPHeaders()
        twoLines.add(name: "Range", value: "bytes=0-1")
        twoLines.add(name: "Range", value: "bytes=2-3")
        #expect(RangeRequest.decide(headers: twoLines, length: 10, etag: "\"a\"", lastModified: nil) { nil } == .whole)
    }

    @Test("RFC 9110 §13.1.5: If-Range matches only a strong validator")
    func ifRange() {
        let modified = "Thu, 01 Jan 2026 00:00:00 GMT"
        let later = "Thu, 01 Jan 2026 00:00:05 GMT"
        #expect(Self.decide("bytes=0-9", ifRange: "\"v1\"") == .part(0...9))
        #expect(Self.decide("bytes=0-9", ifRange: "\"v2\"") == .whole)
        #expect(Self.decide("bytes=0-9", ifRange: "W/\"v1\"") == .whole)
        #expect(Self.decide("bytes=0-9", ifRange: "W/\"v1\"", etag: "W/\"v1\"") == .whole)
        #expect(Self.decide("bytes=0-9", ifRange: modified, lastModified: modified, date: later) == .part(0...9))
        // A Last-Modified within a second of Date could hide a second change: weak.
        #expect(Self.decide("bytes=0-9", ifRange: modified, lastModified: modified, date: modified) == .whole)
        #expect(Self.decide("bytes=0-9", ifRange: later, lastModified: modified, date: later) == .whole)
        #expect(Self.decide("bytes=0-9", ifRange: modified, lastModified: nil, date: later) == .whole)
    }
}
