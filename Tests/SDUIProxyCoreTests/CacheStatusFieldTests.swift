import NIOCore
import SDUIProxyCore
import Testing

/// The `Cache-Status` member (RFC 9211) as written: parameters in order, the key as an sf-string.
@Suite struct CacheStatusFieldTests {
    @Test("members are written in RFC 9211's order; a key is quoted and escaped")
    func written() {
        #expect(
            CacheStatus(hit: true, ttl: 42).fieldValue(cacheName: "sdui-proxy", key: nil) == "sdui-proxy; hit; ttl=42"
        )
        let everything = CacheStatus(
            forward: .varyMiss,
            forwardStatus: 200,
            ttl: -3,
            stored: true,
            collapsed: true,
            detail: "stale-if-error"
        )
        #expect(
            everything.fieldValue(cacheName: "c", key: "/a\"b\\c\u{1}")
                == #"c; fwd=vary-miss; fwd-status=200; ttl=-3; stored; collapsed; key="/a\"b\\c"; detail=stale-if-error"#
        )
        #expect(
            CacheStatus(detail: "only-if-cached").fieldValue(cacheName: "x", key: nil) == "x; detail=only-if-cached"
        )
    }

    @Test("the member copied into a head, numbers as digits, is the field value, within the room it asks for")
    func copiedAsTheFieldValue() {
        let statuses = [
            CacheStatus(hit: true, ttl: 42),
            CacheStatus(forward: .bypass, forwardStatus: 200),
            CacheStatus(forward: .uriMiss, forwardStatus: 503, ttl: 0, stored: true),
            CacheStatus(forward: .stale, forwardStatus: 304, ttl: -3, collapsed: true, detail: "stale-if-error"),
            CacheStatus(hit: true, ttl: .min),
            CacheStatus(forward: .request, forwardStatus: 999, ttl: .max),
            CacheStatus(),
        ]
        // And every combination of the parameters, each present or not: the copy writes them one by one, in the
        // order the field value's walk gives them.
        let combinations = (0..<128).map { bits in
            CacheStatus(
                hit: bits & 1 != 0,
                forward: bits & 2 != 0 ? .varyMiss : nil,
                forwardStatus: bits & 4 != 0 ? 404 : nil,
                ttl: bits & 8 != 0 ? -7 : nil,
                stored: bits & 16 != 0,
                collapsed: bits & 32 != 0,
                detail: bits & 64 != 0 ? "stale-while-revalidate" : nil
            )
        }
        for status in statuses + combinations {
            var buffer = ByteBuffer()
            status.write(cacheName: "edge/1", key: nil, into: &buffer)
            #expect(String(buffer: buffer) == status.fieldValue(cacheName: "edge/1", key: nil))
            #expect(buffer.readableBytes <= status.maximumByteCount(cacheName: "edge/1"))
        }
    }

    @Test(
        "a cache name must be an sf-token",
        arguments: [
            ("sdui-proxy", true), ("edge/1:a", true), ("*", true), ("CDN_1", true),
            ("1cdn", false), ("", false), ("a b", false), ("a;b", false), ("\"q\"", false),
        ]
    )
    func names(name: String, valid: Bool) {
        #expect(CacheStatus.isToken(name) == valid, "\(name)")
    }
}

/// Decimal numbers written straight into a response's bytes.
@Suite struct DecimalWritingTests {
    @Test(
        "every magnitude, signs and the extremes",
        arguments: [0, 7, 10, 99, 100, 12_345, -1, -60, .max, .min] as [Int64]
    )
    func decimal(value: Int64) {
        var buffer = ByteBuffer()
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: HTTPWireFormat.maximumDecimalDigits + 2) { out in
            let start = HTTPWireFormat.copy("=", to: out, at: 0)
            return HTTPWireFormat.writeDecimal(value, to: out, at: start)
        }
        #expect(String(buffer: buffer) == "=\(value)")
    }
}
