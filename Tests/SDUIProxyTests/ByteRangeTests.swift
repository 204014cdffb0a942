import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Byte ranges served from stored responses (RFC 9110 section 14), against a real origin over loopback.
@Suite("RFC 9110 §14: byte ranges from stored responses")
struct ByteRangeTests {
    /// 26 bytes: offsets are easy to read off.
    private static let alphabet = "abcdefghijklmnopqrstuvwxyz"

    private static func origin() -> TestOrigin.Responder {
        { _ in
            TestOrigin.Response(
                headers: [
                    ("Content-Type", "text/plain"), ("Cache-Control", "max-age=60"), ("ETag", "\"abc\""),
                    ("Accept-Ranges", "none"),
                ],
                body: Self.alphabet
            )
        }
    }

    @Test(
        "RFC 9110 §14.2: one range of a stored 200 is a 206 with Content-Range, from memory",
        arguments: [
            ("bytes=0-4", "bytes 0-4/26", "abcde"),
            ("bytes=-3", "bytes 23-25/26", "xyz"),
            ("bytes=20-", "bytes 20-25/26", "uvwxyz"),
            ("bytes=10-1000", "bytes 10-25/26", "klmnopqrstuvwxyz"),
        ]
    )
    func partial(range: String, contentRange: String, body: String) async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy async throws in
            let whole = try await proxy.get("/a")
            #expect(whole["Accept-Ranges"] == "bytes", "a stored 200 serves ranges, whatever the backend said")
            let part = try await proxy.get("/a", headers: [("Range", range)])
            #expect(part.status == .partialContent)
            #expect(part["Content-Range"] == contentRange)
            #expect(part.body == body)
            #expect(part["Content-Length"] == String(body.utf8.count))
            #expect(part["X-Cache"] == "HIT")
            #expect(part["ETag"] == "\"abc\"")
            #expect(proxy.origin.requestCount == 1)
        }
    }

    @Test("RFC 9110 §15.5.17: a range past the end is a 416 naming the length")
    func unsatisfiable() async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy async throws in
            _ = try await proxy.get("/a")
            let reply = try await proxy.get("/a", headers: [("Range", "bytes=26-")])
            #expect(reply.status == .rangeNotSatisfiable)
            #expect(reply["Content-Range"] == "bytes */26")
            #expect(reply.body.isEmpty)
        }
    }

    @Test(
        "RFC 9110 §14.2: several ranges, another unit, bad syntax, a failed If-Range or HEAD get the whole 200",
        arguments: [
            [("Range", "bytes=0-1,3-4")], [("Range", "items=0-1")], [("Range", "bytes=5-1")],
            [("Range", "bytes=0-1"), ("If-Range", "\"other\"")], [("Range", "bytes=0-1"), ("If-Range", "W/\"abc\"")],
        ]
    )
    func whole(headers: [(String, String)]) async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy async throws in
            _ = try await proxy.get("/a")
            let reply = try await proxy.get("/a", headers: headers)
            #expect(reply.status == .ok, "\(headers)")
            #expect(reply.body == Self.alphabet)
        }
    }

    @Test("HEAD with a Range gets the whole head; a strong If-Range that matches gets the part")
    func headAndIfRange() async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy async throws in
            _ = try await proxy.get("/a")
            let head = try await proxy.get("/a", headers: [("Range", "bytes=0-1")], method: .HEAD)
            #expect(head.status == .ok)
            #expect(head["Content-Length"] == "26")
            let matched = try await proxy.get("/a", headers: [("Range", "bytes=0-1"), ("If-Range", "\"abc\"")])
            #expect(matched.status == .partialContent)
            #expect(matched.body == "ab")
        }
    }

    @Test("Beagle 1.x's form serves ranges too: the part, with its beagle-hash and max-age")
    func beagleForm() async throws {
        try await ProxyHarness.run(origin: Self.origin(), configure: { $0.compat.beagleHash = true }) {
            proxy async throws in
            _ = try await proxy.get("/a")
            let part = try await proxy.get("/a", headers: [("Range", "bytes=0-2")])
            #expect(part.status == .partialContent)
            #expect(part.body == "abc")
            #expect(part["Content-Range"] == "bytes 0-2/26")
            #expect(part["beagle-hash"] != nil)
            #expect(part["Cache-Control"]?.hasPrefix("max-age=") == true)
        }
    }

    @Test("a condition that holds answers 304 before any range")
    func notModifiedFirst() async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy async throws in
            _ = try await proxy.get("/a")
            let reply = try await proxy.get("/a", headers: [("Range", "bytes=0-1"), ("If-None-Match", "\"abc\"")])
            #expect(reply.status == .notModified)
        }
    }

    @Test("a miss with a Range stores the whole representation, then answers the part")
    func missStoresWhole() async throws {
        try await ProxyHarness.run(origin: Self.origin()) { proxy async throws in
            let first = try await proxy.get("/a", headers: [("Range", "bytes=2-3")])
            #expect(first.status == .partialContent)
            #expect(first.body == "cd")
            #expect(first["X-Cache"] == "MISS")
            #expect(proxy.origin.requests.first?.headers.contains(name: "range") == false)
            let whole = try await proxy.get("/a")
            #expect(whole["X-Cache"] == "HIT")
            #expect(whole.body == Self.alphabet)
        }
    }

    @Test("a range of a large stored body (kept in its own buffer) is that slice")
    func largeBody() async throws {
        let body = String((0..<40_000).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) })
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response(headers: [("Content-Type", "text/plain"), ("Cache-Control", "max-age=60")], body: body)
        }) { proxy async throws in
            _ = try await proxy.get("/big")
            let part = try await proxy.get("/big", headers: [("Range", "bytes=30000-30009")])
            #expect(part.status == .partialContent)
            #expect(part.body == String(body.dropFirst(30_000).prefix(10)))
            #expect(part["Content-Range"] == "bytes 30000-30009/40000")
        }
    }
}
