import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

/// Parts of a representation held without the whole (RFC 9111 sections 3.3 and 3.4), and the decision of what a
/// request that found no whole response does with them.
@Suite("Partial content: parts, combining and the plan")
struct PartialContentTests {
    private static let alphabet = Array("abcdefghijklmnopqrstuvwxyz".utf8)
    private static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    /// The part `first...last` of the alphabet, under `etag`, fresh for a minute from ``start``.
    private static func part(_ first: Int, _ last: Int, etag: String = "\"v1\"", length: Int = 26) -> PartialContent {
        PartialContent(
            etag: etag,
            range: ContentRange(first: first, last: last, completeLength: length)!,
            body: ByteBuffer(bytes: alphabet[first...last]),
            headers: ["Content-Type": "text/plain", "ETag": etag],
            tags: [],
            storedAt: start,
            initialAge: 0,
            freshnessLifetime: 60
        )
    }

    private static func text(_ buffer: ByteBuffer?) -> String? { buffer.map { String(buffer: $0) } }

    private static func held(_ combination: PartialContent.Combination) -> PartialContent? {
        if case .parts(let content) = combination { return content }
        return nil
    }

    // MARK: Content-Range

    @Test(
        "RFC 9110 §14.4: Content-Range of one part, with its complete length",
        arguments: [
            ("bytes 0-4/26", 0, 4, 26), ("BYTES 21-25/26", 21, 25, 26), ("  bytes 5-5/6 ", 5, 5, 6),
        ]
    )
    func contentRange(value: String, first: Int, last: Int, length: Int) {
        let range = ContentRange(value)
        #expect(range == ContentRange(first: first, last: last, completeLength: length))
        #expect(range?.value == "bytes \(first)-\(last)/\(length)")
    }

    @Test(
        "RFC 9110 §14.4: an unknown length, an unsatisfied range, another unit or a range past the length is no part",
        arguments: [
            "bytes 0-4/*", "bytes */26", "items 0-4/26", "bytes 4-0/26", "bytes 0-26/26", "bytes 0-4", "bytes a-b/c",
            "",
        ]
    )
    func notAPart(value: String) {
        #expect(ContentRange(value) == nil)
    }

    // MARK: Parts

    @Test("RFC 9111 §3.3: a range inside a held part is cut from it; one past it is not held")
    func servesInside() {
        let content = Self.part(0, 19)
        #expect(Self.text(content.bytes(5...9)) == "fghij")
        #expect(Self.text(content.bytes(0...19)) == "abcdefghijklmnopqrst")
        #expect(content.covers(0...19))
        #expect(!content.covers(15...20))
        #expect(content.bytes(15...20) == nil)
        #expect(content.prefixLength == 20)
        #expect(!content.isComplete)
        #expect(Self.part(3, 9).prefixLength == 0, "a part that does not start at the first byte is no prefix")
    }

    @Test("RFC 9111 §3.4: parts under the same strong tag are joined, overlapping or touching, in order")
    func joins() throws {
        let first = try #require(
            Self.held(PartialContent.combining(Self.part(10, 14), with: Self.part(0, 4), maxParts: 16))
        )
        #expect(first.parts.map(\.start) == [0, 10], "apart, they stay two parts, in order")
        let touching = try #require(Self.held(PartialContent.combining(first, with: Self.part(5, 9), maxParts: 16)))
        #expect(touching.parts.count == 1)
        #expect(Self.text(touching.bytes(0...14)) == "abcdefghijklmno")
        let overlapping = try #require(
            Self.held(PartialContent.combining(touching, with: Self.part(12, 20), maxParts: 16))
        )
        #expect(overlapping.parts.count == 1)
        #expect(Self.text(overlapping.bytes(0...20)) == "abcdefghijklmnopqrstu")
        let inside = try #require(Self.held(PartialContent.combining(overlapping, with: Self.part(2, 3), maxParts: 16)))
        #expect(Self.text(inside.bytes(0...20)) == "abcdefghijklmnopqrstu")
    }

    @Test("RFC 9111 §3.4: parts that come to hold every byte are the whole body")
    func completes() {
        guard case .whole(let body) = PartialContent.combining(Self.part(0, 4), with: Self.part(5, 25), maxParts: 16)
        else {
            Issue.record("every byte is held")
            return
        }
        #expect(String(buffer: body) == "abcdefghijklmnopqrstuvwxyz")
        guard case .whole = PartialContent.combining(nil, with: Self.part(0, 25), maxParts: 16) else {
            Issue.record("one part of every byte is the whole")
            return
        }
    }

    @Test("RFC 9111 §3.4: a part under another tag or another length replaces what was held, never joins it")
    func otherValidator() throws {
        let retagged = try #require(
            Self.held(PartialContent.combining(Self.part(0, 4), with: Self.part(5, 25, etag: "\"v2\""), maxParts: 16))
        )
        #expect(retagged.etag == "\"v2\"")
        #expect(retagged.parts.map(\.start) == [5])
        let longer = try #require(
            Self.held(PartialContent.combining(Self.part(0, 4), with: Self.part(5, 25, length: 30), maxParts: 16))
        )
        #expect(longer.parts.map(\.start) == [5])
    }

    @Test("parts that would hold more than a fill may bring together are not held, nor made whole")
    func boundedBytes() {
        func isTooLarge(_ new: PartialContent, maxBytes: Int) -> Bool {
            if case .tooLarge = PartialContent.combining(Self.part(0, 9), with: new, maxParts: 16, maxBytes: maxBytes) {
                return true
            }
            return false
        }
        #expect(isTooLarge(Self.part(10, 19), maxBytes: 16), "20 bytes are over 16")
        #expect(isTooLarge(Self.part(10, 25), maxBytes: 20), "a whole of 26 bytes is over 20")
        #expect(Self.part(0, 9).heldBytes == 10)
    }

    @Test("cache.maxPartsPerEntry: a part that would make more parts than allowed is not held")
    func bounded() throws {
        let two = try #require(Self.held(PartialContent.combining(Self.part(0, 1), with: Self.part(4, 5), maxParts: 2)))
        guard case .tooFragmented = PartialContent.combining(two, with: Self.part(8, 9), maxParts: 2) else {
            Issue.record("a third part is over the bound")
            return
        }
        // Joined to a held part, it makes no more: held.
        #expect(Self.held(PartialContent.combining(two, with: Self.part(2, 3), maxParts: 2))?.parts.count == 1)
    }

    @Test("a part's body is copied, not kept as a slice of the buffer it came in")
    func copiesBody() {
        var big = ByteBuffer(bytes: Self.alphabet)
        let slice = big.readSlice(length: 5)!
        let content = PartialContent(
            etag: "\"v1\"",
            range: ContentRange(first: 0, last: 4, completeLength: 26)!,
            body: slice,
            headers: [:],
            tags: [],
            storedAt: Self.start,
            initialAge: 0,
            freshnessLifetime: 60
        )
        big.setBytes(Array("ZZZZZ".utf8), at: 0)
        #expect(Self.text(content.bytes(0...4)) == "abcde")
        #expect(content.byteCost > 5 + CachedResponse.bookkeepingBytes)
    }

    @Test("freshness and age count from when the part was stored, as a stored response's")
    func freshness() {
        let content = Self.part(0, 4)
        #expect(content.isFresh(at: Self.start + .seconds(59)))
        #expect(!content.isFresh(at: Self.start + .seconds(60)))
        #expect(content.ageNanoseconds(at: Self.start + .seconds(7)) == 7_000_000_000)
    }

    // MARK: The plan

    private static func step(
        _ headers: HTTPHeaders,
        held: PartialContent? = nil,
        at now: NIODeadline = start,
        fetchesParts: Bool = false,
        mayServeHeld: Bool = true,
        maxFetchBytes: Int = .max
    ) -> PartialContentPlan.Step {
        PartialContentPlan.step(
            headers: headers,
            held: held,
            now: now,
            fetchesParts: fetchesParts,
            mayServeHeld: mayServeHeld,
            maxFetchBytes: maxFetchBytes
        )
    }

    @Test(
        "RFC 9111 §3.3: a range the held parts cover is served from them: inside, a suffix, an open range",
        arguments: [("bytes=5-9", 15...19, 5...9), ("bytes=-5", 10...25, 21...25), ("bytes=12-", 10...25, 12...25)]
    )
    func serves(range: String, held: ClosedRange<Int>, served: ClosedRange<Int>) {
        let content = Self.part(held.lowerBound == 15 ? 0 : held.lowerBound, held.upperBound)
        #expect(Self.step(["Range": range], held: content) == .serve(served))
    }

    @Test("RFC 9111 §3.4: a range past the held parts is fetched with If-Range on their tag; a stale part is fetched")
    func fetchesUncovered() {
        let content = Self.part(0, 9)
        #expect(
            Self.step(["Range": "bytes=5-14"], held: content)
                == .fetch(range: "bytes=5-14", ifRange: "\"v1\"", whole: false)
        )
        #expect(
            Self.step(["Range": "bytes=0-4"], held: content, at: Self.start + .seconds(61))
                == .fetch(range: "bytes=0-4", ifRange: "\"v1\"", whole: false)
        )
    }

    @Test("RFC 9111 §3.4: a request for the whole holding a prefix asks for the rest only")
    func completesPrefix() {
        #expect(Self.step([:], held: Self.part(0, 4)) == .fetch(range: "bytes=5-", ifRange: "\"v1\"", whole: true))
        #expect(Self.step([:], held: Self.part(3, 9)) == .usual, "no prefix: the whole")
        #expect(Self.step(["If-None-Match": "\"v1\""], held: Self.part(0, 4)) == .usual, "a condition is the backend's")
        #expect(Self.step([:]) == .usual)
    }

    @Test("with nothing held, a range is fetched as a range only when parts are fetched (rangeMiss: part, too large)")
    func nothingHeld() {
        #expect(Self.step(["Range": "bytes=0-4"]) == .usual)
        #expect(
            Self.step(["Range": "bytes=0-4"], fetchesParts: true)
                == .fetch(range: "bytes=0-4", ifRange: nil, whole: false)
        )
    }

    @Test(
        "RFC 9110 §14.2: several ranges, another unit, a bad range or a client's If-Range on another tag get the whole",
        arguments: [
            ["Range": "bytes=0-1,3-4"], ["Range": "items=0-1"], ["Range": "bytes=5-1"],
            ["Range": "bytes=0-1", "If-Range": "\"v2\""], ["Range": "bytes=0-1", "If-Range": "W/\"v1\""],
        ] as [HTTPHeaders]
    )
    func whole(headers: HTTPHeaders) {
        #expect(Self.step(headers, held: Self.part(0, 9), fetchesParts: true) == .usual)
    }

    @Test(
        "RFC 9110 §13.2.2: a request with a condition of its own goes the usual way, a range or not",
        arguments: [
            ["Range": "bytes=0-4", "If-None-Match": "\"v1\""],
            ["Range": "bytes=20-", "If-Modified-Since": "Sun, 06 Nov 1994 08:49:37 GMT"],
            ["Range": "bytes=0-4", "If-Match": "\"v1\""], ["If-Unmodified-Since": "Sun, 06 Nov 1994 08:49:37 GMT"],
        ] as [HTTPHeaders]
    )
    func ownCondition(headers: HTTPHeaders) {
        #expect(Self.step(headers, held: Self.part(0, 9), fetchesParts: true) == .usual)
    }

    @Test("held parts answer only when they may: a client's no-cache that is honoured sends the range up")
    func mayNotServe() {
        #expect(
            Self.step(["Range": "bytes=0-4"], held: Self.part(0, 9), mayServeHeld: false)
                == .fetch(range: "bytes=0-4", ifRange: "\"v1\"", whole: false)
        )
    }

    @Test("a prefix whose whole could not be held (over upstream.maxResponseBytes) is not completed")
    func prefixTooLargeToComplete() {
        #expect(Self.step([:], held: Self.part(0, 4), maxFetchBytes: 25) == .usual)
    }

    @Test("RFC 9110 §13.1.5: a client's If-Range on the parts' own tag is served from them")
    func clientIfRange() {
        #expect(Self.step(["Range": "bytes=0-1", "If-Range": "\"v1\""], held: Self.part(0, 9)) == .serve(0...1))
    }
}
