import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Partial content held and reused (RFC 9111 sections 3.3 and 3.4), against a real origin over loopback that
/// serves byte ranges and judges `If-Range` as RFC 9110 section 13.1.5 says.
@Suite("RFC 9111 §3.3, §3.4: partial content stored, combined and completed")
struct PartialContentProxyTests {
    /// 26 bytes: offsets are easy to read off.
    private static let alphabet = "abcdefghijklmnopqrstuvwxyz"

    /// The representation the origin serves now: its body and tag (a test may change it).
    private final class Representation: Sendable {
        private let state = NIOLockedValueBox((body: PartialContentProxyTests.alphabet, etag: "\"v1\""))
        var current: (body: String, etag: String) { state.withLockedValue { $0 } }
        func change(to body: String, etag: String) { state.withLockedValue { $0 = (body, etag) } }
    }

    /// An origin that answers one byte range with a 206 (the whole with a 200 when `If-Range` names another tag, or
    /// with no `Range`), with `headers` beside its `ETag`; a header `X-Unknown-Length` makes its `Content-Range`
    /// say `/*`.
    private static func origin(
        _ representation: Representation = Representation(),
        headers: [(String, String)] = [("Cache-Control", "max-age=60")]
    ) -> TestOrigin.Responder {
        let unknownLength = headers.contains { $0.0 == "X-Unknown-Length" }
        return { request in
            let (body, etag) = representation.current
            var response = TestOrigin.Response(headers: [("Content-Type", "text/plain"), ("ETag", etag)] + headers)
            let bytes = Array(body.utf8)
            guard let value = request.headers.first(name: "range"), let spec = RangeRequest.byteRange(value),
                request.headers.first(name: "if-range").map({ $0 == etag }) ?? true
            else {
                response.body = body
                return response
            }
            guard case .part(let range) = RangeRequest.satisfy(spec, length: bytes.count) else {
                response.status = .rangeNotSatisfiable
                response.headers.append(("Content-Range", "bytes */\(bytes.count)"))
                return response
            }
            response.status = .partialContent
            let length = unknownLength ? "*" : String(bytes.count)
            response.headers.append(("Content-Range", "bytes \(range.lowerBound)-\(range.upperBound)/\(length)"))
            response.body = String(decoding: bytes[range], as: UTF8.self)
            return response
        }
    }

    private static func partsFetched(_ configuration: inout ProxyConfiguration) {
        configuration.cache.rangeMiss = .part
    }

    @Test(
        "RFC 9111 §3.3: a 206 is stored; the same range, one inside it, a suffix and an open range are answered from it",
        arguments: [
            ("bytes=10-", "bytes=10-", "bytes 10-25/26", "klmnopqrstuvwxyz"),
            ("bytes=10-", "bytes=15-19", "bytes 15-19/26", "pqrst"),
            ("bytes=10-", "bytes=-5", "bytes 21-25/26", "vwxyz"),
            ("bytes=10-", "bytes=12-", "bytes 12-25/26", "mnopqrstuvwxyz"),
            ("bytes=0-19", "bytes=5-9", "bytes 5-9/26", "fghij"),
        ]
    )
    func storedAndReused(stored: String, asked: String, contentRange: String, body: String) async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            let first = try await proxy.get("/a", headers: [("Range", stored)])
            #expect(first.status == .partialContent)
            #expect(first["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.first?.headers.first(name: "range") == stored, "the range itself went up")

            let reply = try await proxy.get("/a", headers: [("Range", asked)])
            #expect(reply.status == .partialContent)
            #expect(reply["X-Cache"] == "HIT")
            #expect(reply["Content-Range"] == contentRange)
            #expect(reply["Content-Length"] == String(body.utf8.count))
            #expect(reply["ETag"] == "\"v1\"")
            #expect(reply["Age"] != nil)
            #expect(reply.body == body)
            #expect(proxy.origin.requestCount == 1)
            let stats = try await proxy.admin("/cache/stats").body
            #expect(stats.contains(#""partialEntries":1"#))
            #expect(stats.contains(#""partialHits":1"#))
        }
    }

    @Test("RFC 9111 §3.4: parts under one strong tag are combined; once every byte is held the whole is stored")
    func combinedIntoWhole() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            let rest = try await proxy.get("/a", headers: [("Range", "bytes=10-25")])
            #expect(rest.status == .partialContent)
            #expect(rest.body == "klmnopqrstuvwxyz")
            let asked = proxy.origin.requests[1].headers
            #expect(asked.first(name: "range") == "bytes=10-25")
            #expect(asked.first(name: "if-range") == "\"v1\"", "asked on the held parts' tag, so the answer joins them")

            let whole = try await proxy.get("/a")
            #expect(whole.status == .ok)
            #expect(whole["X-Cache"] == "HIT")
            #expect(whole.body == Self.alphabet)
            #expect(whole["Content-Length"] == "26")
            #expect(try await proxy.get("/a", headers: [("Range", "bytes=3-5")]).body == "def")
            #expect(proxy.origin.requestCount == 2)
            #expect(try await proxy.admin("/cache/stats").body.contains(#""partialEntries":0"#))
        }
    }

    @Test("RFC 9111 §3.4: parts of another representation (another tag) are not combined: the backend's whole wins")
    func otherTagNotCombined() async throws {
        let representation = Representation()
        try await ProxyHarness.run(origin: Self.origin(representation), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            representation.change(to: Self.alphabet.uppercased(), etag: "\"v2\"")
            // If-Range "v1" fails at the backend: it sends the whole new representation, which is stored.
            let reply = try await proxy.get("/a", headers: [("Range", "bytes=10-12")])
            #expect(reply.status == .partialContent)
            #expect(reply.body == "KLM")
            #expect(reply["ETag"] == "\"v2\"")
            let whole = try await proxy.get("/a")
            #expect(whole["X-Cache"] == "HIT")
            #expect(whole.body == Self.alphabet.uppercased(), "no byte of the old parts in it")
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test(
        "RFC 9111 §3.4: holding a prefix, a request for the whole asks for the missing bytes only, and is stored whole"
    )
    func prefixCompleted() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            let prefix = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            #expect(prefix.body == "abcde")

            let whole = try await proxy.get("/a")
            #expect(whole.status == .ok)
            #expect(whole.body == Self.alphabet)
            #expect(whole["Content-Length"] == "26")
            #expect(whole["Content-Range"] == nil)
            #expect(whole["X-Cache"] == "MISS")
            let asked = proxy.origin.requests[1].headers
            #expect(asked.first(name: "range") == "bytes=5-")
            #expect(asked.first(name: "if-range") == "\"v1\"")

            let again = try await proxy.get("/a")
            #expect(again["X-Cache"] == "HIT")
            #expect(again.body == Self.alphabet)
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("RFC 9111 §3.4: a held prefix of a representation that changed gets the new whole, not a mix")
    func prefixOfChangedRepresentation() async throws {
        let representation = Representation()
        try await ProxyHarness.run(origin: Self.origin(representation), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            representation.change(to: Self.alphabet.uppercased(), etag: "\"v2\"")
            let whole = try await proxy.get("/a")
            #expect(whole.status == .ok)
            #expect(whole.body == Self.alphabet.uppercased())
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
        }
    }

    @Test("cache.maxPartsPerEntry bounds the parts of one representation: a part past it is served, not held")
    func boundedParts() async throws {
        try await ProxyHarness.run(
            origin: Self.origin(),
            configure: {
                $0.cache.rangeMiss = .part
                $0.cache.maxPartsPerEntry = 2
            }
        ) { proxy in
            for range in ["bytes=0-1", "bytes=4-5", "bytes=8-9"] {
                #expect(try await proxy.get("/a", headers: [("Range", range)]).status == .partialContent)
            }
            #expect(try await proxy.get("/a", headers: [("Range", "bytes=4-5")])["X-Cache"] == "HIT")
            let third = try await proxy.get("/a", headers: [("Range", "bytes=8-9")])
            #expect(third["X-Cache"] == "MISS", "the third part was not held")
            #expect(third.body == "ij")
            #expect(proxy.origin.requestCount == 4)
        }
    }

    @Test("a representation too large to hold whole is held in parts, whatever cache.rangeMiss says")
    func tooLargeHeldInParts() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: { $0.upstream.maxResponseBytes = 16 }) { proxy in
            // The whole is too large: streamed, and the key marked.
            let first = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            #expect(first.body == "abcdefghij")
            let second = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            #expect(second.body == "abcdefghij")
            #expect(proxy.origin.requests.last?.headers.first(name: "range") == "bytes=0-9")
            let count = proxy.origin.requestCount
            let third = try await proxy.get("/a", headers: [("Range", "bytes=2-4")])
            #expect(third["X-Cache"] == "HIT")
            #expect(third.body == "cde")
            #expect(proxy.origin.requestCount == count)
            // The whole could not be held: no attempt to complete the prefix, the whole streamed as it was.
            let whole = try await proxy.get("/a")
            #expect(whole.body == Self.alphabet)
            #expect(proxy.origin.requests.last?.headers.first(name: "range") == nil)
            // Parts past what a fill may bring are served, not held.
            let past = try await proxy.get("/a", headers: [("Range", "bytes=10-19")])
            #expect(past.body == "klmnopqrst")
            #expect(try await proxy.get("/a", headers: [("Range", "bytes=10-19")])["X-Cache"] != "HIT")
        }
    }

    @Test(
        "a 206 without a strong tag, of an unknown length, in a coding, varying beyond the key, or not storable is not held",
        arguments: [
            [("Cache-Control", "max-age=60"), ("X-Weak", "1")], [("Cache-Control", "no-store")],
            [("Cache-Control", "max-age=60"), ("X-Unknown-Length", "1")],
            [("Cache-Control", "max-age=60"), ("Content-Encoding", "x-custom")],
            [("Cache-Control", "max-age=60"), ("Vary", "X-Mood")],
        ]
    )
    func notHeld(headers: [(String, String)]) async throws {
        let weak = headers.contains { $0.0 == "X-Weak" }
        let representation = Representation()
        if weak { representation.change(to: Self.alphabet, etag: "W/\"v1\"") }
        try await ProxyHarness.run(origin: Self.origin(representation, headers: headers), configure: Self.partsFetched)
        {
            proxy in
            let first = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            #expect(first.status == .partialContent)
            #expect(first.body == "abcde")
            #expect(first["Content-Range"]?.hasPrefix("bytes 0-4/") == true)
            let second = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            #expect(second["X-Cache"] != "HIT")
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("an answer to a range that is not a 206 or a 200 (a 416) is passed on, never stored for the target")
    func unsatisfiedNotStored() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            let past = try await proxy.get("/a", headers: [("Range", "bytes=30-")])
            #expect(past.status == .rangeNotSatisfiable)
            #expect(past["Content-Range"] == "bytes */26")
            let whole = try await proxy.get("/a")
            #expect(whole.status == .ok)
            #expect(whole.body == Self.alphabet)
            #expect(whole["X-Cache"] == "MISS")
        }
    }

    @Test("RFC 9110 §13.2.2: a range with a condition of its own is judged on the whole: a 304, no range asked for")
    func rangeWithCondition() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            let reply = try await proxy.get("/a", headers: [("Range", "bytes=0-4"), ("If-None-Match", "\"v1\"")])
            #expect(reply.status == .notModified)
            #expect(proxy.origin.requests.last?.headers.first(name: "range") == nil, "the whole was fetched")
        }
    }

    @Test("a HEAD with parts held is answered from a fill of the whole, as any HEAD")
    func headWithPartsHeld() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            let head = try await proxy.get("/a", method: .HEAD)
            #expect(head.status == .ok)
            #expect(head["Content-Length"] == "26")
            #expect(head.body.isEmpty)
            #expect(proxy.origin.requests.last?.headers.first(name: "range") == nil)
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
        }
    }

    @Test("RFC 9111 §4.2.3: a whole made of parts counts its age from the Age its last part came with")
    func ageOfCompletedWhole() async throws {
        let headers = [("Cache-Control", "max-age=600"), ("Age", "100")]
        try await ProxyHarness.run(origin: Self.origin(headers: headers), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            _ = try await proxy.get("/a")
            let hit = try await proxy.get("/a")
            #expect(hit["X-Cache"] == "HIT")
            #expect((hit["Age"].flatMap { Int($0) } ?? 0) >= 100)
        }
    }

    @Test("/metrics counts held parts and the ranges they answered")
    func metrics() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            _ = try await proxy.get("/a", headers: [("Range", "bytes=2-3")])
            let metrics = try await proxy.admin("/metrics").body
            #expect(metrics.contains("sdui_cache_partial_entries 1"))
            #expect(metrics.contains("sdui_cache_partial_hits_total 1"))
        }
    }

    @Test("a purge of the target reaches its held parts")
    func purgeReachesParts() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            let purge = try await proxy.admin("/cache?url=/a", method: .DELETE)
            #expect(purge.body.contains(#""purged":1"#))
            let after = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            #expect(after["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.last?.headers.first(name: "if-range") == nil, "nothing held to join")
        }
    }

    @Test("a purge by tag reaches held parts, their tag field read as a stored response's (a list by commas)")
    func purgeByTag() async throws {
        let headers = [("Cache-Control", "max-age=60"), ("Surrogate-Key", "screens,all")]
        try await ProxyHarness.run(origin: Self.origin(headers: headers), configure: Self.partsFetched) { proxy in
            _ = try await proxy.get("/a", headers: [("Range", "bytes=0-9")])
            #expect(try await proxy.get("/a", headers: [("Range", "bytes=0-4")])["X-Cache"] == "HIT")
            let purge = try await proxy.admin("/cache?tag=all", method: .DELETE)
            #expect(purge.body.contains(#""purged":1"#))
            #expect(try await proxy.get("/a", headers: [("Range", "bytes=0-4")])["X-Cache"] == "MISS")
        }
    }

    @Test("with cache.rangeMiss: whole (the default) a range miss still stores the whole and asks for no range")
    func wholeByDefault() async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy in
            let part = try await proxy.get("/a", headers: [("Range", "bytes=0-4")])
            #expect(part.body == "abcde")
            #expect(proxy.origin.requests.first?.headers.first(name: "range") == nil)
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
        }
    }
}
