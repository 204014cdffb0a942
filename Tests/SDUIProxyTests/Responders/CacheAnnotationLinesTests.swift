import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The annotation's lines as an HTTP/1.1 head carries them: the same fields a composed head gets, `Age` first when
/// the response was stored.
@Suite struct CacheAnnotationLinesTests {
    private static func reporting(xCache: Bool, key: Bool) -> CacheReporting {
        var cache = ProxyConfiguration.Cache()
        cache.name = "edge"
        cache.xCacheHeader = xCache
        cache.cacheStatusKey = key
        return CacheReporting(cache)
    }

    /// The lines ``CacheAnnotation/forEachField(lowercased:_:)`` gives, as a head writes them.
    private static func composed(_ annotation: CacheAnnotation, age: Int64?) -> String {
        var lines = age.map { "Age: \($0)\r\n" } ?? ""
        annotation.forEachField(lowercased: false) { name, value in lines += "\(name): \(value)\r\n" }
        return lines
    }

    @Test(
        "written lines are the composed fields, with and without X-Cache and the key, with and without Age",
        arguments: [(false, false), (true, false), (false, true), (true, true)]
    )
    func lines(xCache: Bool, key: Bool) {
        let reporting = Self.reporting(xCache: xCache, key: key)
        let cacheKey = CacheKey(target: "/screens/a?b=\"c\"", platform: "IOS")
        var answered = reporting.forwarded(.bypass)
        answered.status.forwardStatus = 503
        var collapsed = answered
        collapsed.status.collapsed = true
        let annotations = [
            reporting.forwarded(.bypass),
            // Copied whole up to the status, unless it says more than a bypass's status.
            answered,
            collapsed,
            reporting.annotation(
                .miss,
                CacheStatus(forward: .uriMiss, forwardStatus: 200, stored: true),
                key: cacheKey
            ),
            // Copied whole up to the backend's status, unless it says more (or less) than a stored miss.
            reporting.annotation(
                .miss,
                CacheStatus(forward: .uriMiss, forwardStatus: 200, ttl: 60, stored: true),
                key: cacheKey
            ),
            reporting.annotation(
                .miss,
                CacheStatus(forward: .uriMiss, forwardStatus: 404, ttl: -1, stored: true, collapsed: true),
                key: cacheKey
            ),
            reporting.annotation(
                .miss,
                CacheStatus(forward: .varyMiss, forwardStatus: 200, ttl: 9, stored: true),
                key: nil
            ),
            // The fast path's numbers at their edges: a ttl of zero or long past, a status of any size.
            reporting.annotation(
                .miss,
                CacheStatus(forward: .uriMiss, forwardStatus: 0, ttl: 0, stored: true),
                key: nil
            ),
            reporting.annotation(
                .miss,
                CacheStatus(forward: .uriMiss, forwardStatus: 1_000_000, ttl: .min, stored: true),
                key: nil
            ),
            reporting.annotation(.hit, CacheStatus(hit: true, ttl: -5, detail: "stale-if-error"), key: cacheKey),
            reporting.annotation(.hit, CacheStatus(hit: true, ttl: 60), key: cacheKey),
        ]
        for annotation in annotations {
            var buffer = ByteBuffer()
            annotation.writeLines(into: &buffer)
            #expect(String(buffer: buffer) == Self.composed(annotation, age: nil))
            for age: Int64 in [0, 7, 86_400] {
                var stored = ByteBuffer()
                annotation.writeLines(age: age, into: &stored)
                #expect(String(buffer: stored) == Self.composed(annotation, age: age))
            }
        }
    }
}
