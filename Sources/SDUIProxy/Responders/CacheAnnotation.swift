import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// What the operator tells clients about the cache (`cache.name`, `cache.xCacheHeader`, `cache.cacheStatusKey`),
/// made once per configuration.
///
/// A class: every annotation refers to it, and a hit's lines are copied from ``hitLines`` in one write.
final class CacheReporting: Sendable {
    /// This cache's name in `Cache-Status`, an sf-token.
    let cacheName: String
    /// Whether responses carry `X-Cache` beside `Cache-Status`, for clients that read it.
    let sendsXCache: Bool
    /// Whether `Cache-Status` names the cache key (`key=`): for debugging, it shows clients how entries are keyed.
    let sendsKey: Bool
    /// A plain hit's lines up to its ttl: `X-Cache: HIT` CRLF `Cache-Status: NAME; hit; ttl=`.
    let hitLines: [UInt8]
    /// A forward on a bypass route's lines up to the backend's status: `X-Cache: BYPASS` CRLF
    /// `Cache-Status: NAME; fwd=bypass; fwd-status=`.
    let bypassLines: [UInt8]
    /// A stored miss's lines up to the backend's status: `X-Cache: MISS` CRLF
    /// `Cache-Status: NAME; fwd=uri-miss; fwd-status=`; its ttl and `stored` follow the status.
    let storedMissLines: [UInt8]

    init(_ cache: ProxyConfiguration.Cache) {
        cacheName = cache.name
        sendsXCache = cache.xCacheHeader
        sendsKey = cache.cacheStatusKey
        hitLines = Array(((sendsXCache ? "X-Cache: HIT\r\n" : "") + "Cache-Status: \(cacheName); hit; ttl=").utf8)
        bypassLines = Array(
            ((sendsXCache ? "X-Cache: BYPASS\r\n" : "") + "Cache-Status: \(cacheName); fwd=bypass; fwd-status=").utf8
        )
        storedMissLines = Array(
            ((sendsXCache ? "X-Cache: MISS\r\n" : "") + "Cache-Status: \(cacheName); fwd=uri-miss; fwd-status=").utf8
        )
    }

    /// The annotation of a response to the request keyed `key`.
    func annotation(_ result: CacheResult, _ status: CacheStatus, key: CacheKey?) -> CacheAnnotation {
        CacheAnnotation(result: result, status: status, reporting: self, key: sendsKey ? key?.description : nil)
    }

    /// The annotation of a request on a route that bypasses the cache, forwarded as it came.
    func forwarded(_ result: CacheResult) -> CacheAnnotation {
        annotation(result, CacheStatus(forward: .bypass), key: nil)
    }
}

/// How the cache took part in one response, as its headers tell the client: `Cache-Status` (RFC 9211) and,
/// unless turned off, `X-Cache`. The result also goes to the access log and the metrics.
struct CacheAnnotation {
    var result: CacheResult
    var status: CacheStatus
    let reporting: CacheReporting
    /// The cache key, when it is reported.
    let key: String?

    /// Adds the annotation's fields to a response's headers.
    func add(to headers: inout HTTPHeaders) {
        forEachField(lowercased: false) { name, value in headers.add(name: name, value: value) }
    }

    /// Calls `body` with each of the annotation's fields: `X-Cache` (unless turned off) and `Cache-Status`, their
    /// names lower-cased for HTTP/2 when `lowercased`.
    func forEachField(lowercased: Bool, _ body: (_ name: String, _ value: String) -> Void) {
        if reporting.sendsXCache { body(lowercased ? "x-cache" : "X-Cache", result.rawValue) }
        body(lowercased ? "cache-status" : "Cache-Status", status.fieldValue(cacheName: reporting.cacheName, key: key))
    }

    /// Appends the annotation's lines, `X-Cache` (unless turned off) and `Cache-Status`, to an encoded head.
    ///
    /// A forward on a bypass route, as nearly every one says, copies its lines whole and writes the backend's
    /// status after them: piece by piece, measured and then copied, they cost every such forward about 600
    /// instructions more.
    func writeLines(into buffer: inout ByteBuffer) {
        guard result == .bypass, key == nil, status.isPlainBypass, let code = status.forwardStatus else {
            return writeAnnotation(age: nil, into: &buffer)
        }
        writeForwardedLines(reporting.bypassLines, age: nil, status: code, storedFor: nil, into: &buffer)
    }

    /// `Age` when given, then ``writeLines(into:)``'s lines, in one write: a write per piece cost every forwarded
    /// response and every miss about 1,500 instructions of capacity and uniqueness checks. A reported key, quoted as
    /// an sf-string, is the one part written after, piece by piece.
    private func writeAnnotation(age: Int64?, into buffer: inout ByteBuffer) {
        let xCache = reporting.sendsXCache ? result.rawValue : nil
        let statusInline = key == nil
        let most =
            (age == nil ? 0 : 7 + HTTPWireFormat.maximumDecimalDigits) + (xCache.map { 11 + $0.utf8.count } ?? 0)
            + 14 + (statusInline ? status.maximumByteCount(cacheName: reporting.cacheName) + 2 : 0)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: most) { out in
            var count = 0
            if let age { count = Self.copyAge(age, to: out, at: count) }
            if let xCache {
                count = HTTPWireFormat.copy("X-Cache: ", to: out, at: count)
                count = xCache.withContiguousUTF8 {
                    HTTPWireFormat.copy(UnsafeRawBufferPointer($0), to: out, at: count)
                }
                count = HTTPWireFormat.copy("\r\n", to: out, at: count)
            }
            count = HTTPWireFormat.copy("Cache-Status: ", to: out, at: count)
            guard statusInline else { return count }
            count = status.copy(cacheName: reporting.cacheName, to: out, at: count)
            return HTTPWireFormat.copy("\r\n", to: out, at: count)
        }
        guard !statusInline else { return }
        status.write(cacheName: reporting.cacheName, key: key, into: &buffer)
        buffer.writeStaticString("\r\n")
    }

    /// Appends `Age` and the annotation's lines to an encoded head, for a response written from its stored bytes.
    ///
    /// A plain hit's lines go out in one write (one capacity and uniqueness check, not a dozen): the hit path
    /// cost 10 % more instructions when each piece was written on its own. A stored miss's are copied whole up to
    /// the backend's status, and its numbers written after: piece by piece, they cost every miss about 450
    /// instructions more.
    func writeLines(age: Int64, into buffer: inout ByteBuffer) {
        guard result == .hit, key == nil, status.isPlainHit, let ttl = status.ttl else {
            if result == .miss, key == nil, status.isPlainStoredMiss, let code = status.forwardStatus,
                let ttl = status.ttl
            {
                return writeForwardedLines(
                    reporting.storedMissLines,
                    age: age,
                    status: code,
                    storedFor: ttl,
                    into: &buffer
                )
            }
            return writeAnnotation(age: age, into: &buffer)
        }
        reporting.hitLines.withUnsafeBytes { hitLines in
            let most =
                5 + HTTPWireFormat.maximumDecimalDigits + 2 + hitLines.count + HTTPWireFormat.maximumDecimalDigits + 2
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: most) { out in
                // Written out here, not through `copyAge` and the wire format's copy: a hit measured 50 instructions
                // more through them.
                var count = HTTPWireFormat.copy("Age: ", to: out, at: 0)
                count = HTTPWireFormat.writeDecimal(age, to: out, at: count)
                count = HTTPWireFormat.copy("\r\n", to: out, at: count)
                UnsafeMutableRawBufferPointer(rebasing: out[count..<(count + hitLines.count)]).copyMemory(
                    from: hitLines
                )
                count = HTTPWireFormat.writeDecimal(ttl, to: out, at: count + hitLines.count)
                return HTTPWireFormat.copy("\r\n", to: out, at: count)
            }
        }
    }

    /// `Age` when given, then `lines` (a ``CacheReporting`` prefix that ends in `fwd-status=`), the backend's
    /// status, and for a stored miss its ttl and `stored`, in one write.
    private func writeForwardedLines(
        _ lines: [UInt8],
        age: Int64?,
        status code: UInt,
        storedFor ttl: Int64?,
        into buffer: inout ByteBuffer
    ) {
        lines.withUnsafeBytes { lines in
            let most = 7 + lines.count + 3 * HTTPWireFormat.maximumDecimalDigits + 16
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: most) { out in
                var count = age.map { Self.copyAge($0, to: out, at: 0) } ?? 0
                count = HTTPWireFormat.copy(lines, to: out, at: count)
                count = HTTPWireFormat.writeDecimal(Int64(truncatingIfNeeded: code), to: out, at: count)
                if let ttl {
                    count = HTTPWireFormat.copy("; ttl=", to: out, at: count)
                    count = HTTPWireFormat.writeDecimal(ttl, to: out, at: count)
                    count = HTTPWireFormat.copy("; stored", to: out, at: count)
                }
                return HTTPWireFormat.copy("\r\n", to: out, at: count)
            }
        }
    }

    /// Copies `Age: age` and CRLF to `out` at `offset`; returns the offset after it.
    @inline(__always)
    private static func copyAge(_ age: Int64, to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        let count = HTTPWireFormat.writeDecimal(age, to: out, at: HTTPWireFormat.copy("Age: ", to: out, at: offset))
        return HTTPWireFormat.copy("\r\n", to: out, at: count)
    }
}
