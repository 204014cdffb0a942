import NIOCore
import NIOHTTP1

/// Parts of one representation that the cache holds without holding all of it (RFC 9111 section 3.3): what 206
/// answers brought, kept as byte ranges, put together only when they carry the same strong entity tag and the
/// same complete length (section 3.4). Once they cover every byte, they are a whole response and stored as one.
///
/// A value: the cache's slot keeps one, and combining makes a new one. Its parts are sorted, and neither overlap
/// nor touch (touching parts are joined), so a range is served from one part or not at all.
public struct PartialContent: Sendable {
    /// A run of the representation's bytes.
    public struct Part: Sendable, Equatable {
        /// The offset of the first byte.
        public let start: Int
        public let bytes: ByteBuffer

        public init(start: Int, bytes: ByteBuffer) {
            self.start = start
            self.bytes = bytes
        }

        /// The offset just past the last byte.
        public var end: Int { start + bytes.readableBytes }
    }

    /// The strong entity tag every part carries.
    public let etag: String
    /// The length of the whole representation.
    public let completeLength: Int
    /// The end-to-end fields of the latest 206, without those of its one part (`Content-Range`,
    /// `Content-Length`): what a part served from here carries (section 3.4: the newest response's fields).
    public let headers: HTTPHeaders
    /// Purge tags, from the configured tag field, so that a purge by tag reaches the parts too.
    public let tags: [String]
    /// When the latest 206 was stored, its corrected initial age and its lifetime, as a stored response's.
    public let storedAt: NIODeadline
    public let initialAge: Int64
    public let freshnessLifetime: Int64
    public private(set) var parts: [Part]

    /// One 206's part, with what its fields say of the representation.
    public init(
        etag: String,
        range: ContentRange,
        body: ByteBuffer,
        headers: HTTPHeaders,
        tags: [String],
        storedAt: NIODeadline,
        initialAge: Int64,
        freshnessLifetime: Int64
    ) {
        precondition(body.readableBytes == range.count, "a part is as long as its range")
        self.etag = etag
        self.completeLength = range.completeLength
        self.headers = headers
        self.tags = tags
        self.storedAt = storedAt
        self.initialAge = initialAge
        self.freshnessLifetime = freshnessLifetime
        // Copied into a buffer of its own: the body may be a slice of a connection's read buffer.
        self.parts = [Part(start: range.first, bytes: ByteBuffer(bytes: body.readableBytesView))]
    }

    /// What storing a new part does to what is held.
    public enum Combination: Sendable {
        /// The parts held now (the new one's fields and freshness, every part).
        case parts(PartialContent)
        /// Every byte is held: the whole body, for a whole response with the new part's fields.
        case whole(ByteBuffer)
        /// Held as they were: the new part would have made more than the parts allowed.
        case tooFragmented
        /// Held as they were: the parts together would have held more bytes than allowed.
        case tooLarge
    }

    /// Combines `new` (one 206's part) with `stored`: joined when both carry the same strong tag and length, else
    /// `new` replaces what was held (it is the backend's current representation). `maxParts` bounds the parts
    /// held, so that a client's ranges cannot fragment the cache; `maxBytes` the bytes they hold together (a whole
    /// response's own bound, so that joined parts never hold more than a fill may).
    public static func combining(
        _ stored: PartialContent?,
        with new: PartialContent,
        maxParts: Int,
        maxBytes: Int = .max
    ) -> Combination {
        var combined = new
        if let stored, stored.etag == new.etag, stored.completeLength == new.completeLength {
            for part in stored.parts { combined.insert(part) }
        }
        if combined.heldBytes > maxBytes { return .tooLarge }
        if combined.isComplete { return .whole(combined.parts[0].bytes) }
        if combined.parts.count > max(1, maxParts) { return .tooFragmented }
        return .parts(combined)
    }

    /// The bytes the parts hold together.
    public var heldBytes: Int { parts.reduce(0) { $0 + $1.bytes.readableBytes } }

    /// Whether every byte is held, in one part.
    public var isComplete: Bool { parts.count == 1 && parts[0].start == 0 && parts[0].end == completeLength }

    /// How many bytes from the first are held, with none missing: where a request for the whole continues.
    public var prefixLength: Int { parts.first.map { $0.start == 0 ? $0.end : 0 } ?? 0 }

    /// The bytes of `range`, when one part holds all of them.
    public func bytes(_ range: ClosedRange<Int>) -> ByteBuffer? {
        part(holding: range).flatMap { part in
            part.bytes.getSlice(at: part.bytes.readerIndex + range.lowerBound - part.start, length: range.count)
        }
    }

    /// Whether the parts hold every byte of `range`.
    public func covers(_ range: ClosedRange<Int>) -> Bool { part(holding: range) != nil }

    /// The part that holds every byte of `range` (parts never touch, so at most one does).
    private func part(holding range: ClosedRange<Int>) -> Part? {
        parts.first { $0.start <= range.lowerBound && range.upperBound < $0.end }
    }

    /// The age, in nanoseconds, at `now` (RFC 9111 section 4.2.3).
    public func ageNanoseconds(at now: NIODeadline) -> Int64 {
        initialAge &* 1_000_000_000 &+ max(0, (now - storedAt).nanoseconds)
    }

    public func isFresh(at now: NIODeadline) -> Bool {
        ageNanoseconds(at: now) < freshnessLifetime &* 1_000_000_000
    }

    /// What the parts cost against the cache's byte budget: their bytes, their fields, and what any entry costs
    /// beyond its bytes.
    public var byteCost: Int {
        let fields = headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
        let bytes = parts.reduce(0) { $0 + $1.bytes.readableBytes + 64 }
        return bytes + fields + etag.utf8.count + CachedResponse.bookkeepingBytes
    }

    /// Inserts `part`, joining it with the parts it overlaps or touches. Overlapping bytes are the same bytes (the
    /// same strong tag says so); those already held are kept.
    mutating func insert(_ part: Part) {
        var start = part.start
        var end = part.end
        var joined: [Part] = []
        var kept: [Part] = []
        for held in parts {
            if held.end < start || held.start > end {
                kept.append(held)
            } else {
                joined.append(held)
                start = min(start, held.start)
                end = max(end, held.end)
            }
        }
        if joined.isEmpty {
            kept.append(part)
        } else {
            joined.append(part)
            var buffer = ByteBufferAllocator().buffer(capacity: end - start)
            // Each byte from the first part that holds it, in offset order.
            var next = start
            for piece in joined.sorted(by: { $0.start < $1.start }) where piece.end > next {
                let from = next - piece.start
                if let slice = piece.bytes.getSlice(
                    at: piece.bytes.readerIndex + from,
                    length: piece.end - next
                ) {
                    var slice = slice
                    buffer.writeBuffer(&slice)
                }
                next = piece.end
            }
            kept.append(Part(start: start, bytes: buffer))
        }
        parts = kept.sorted { $0.start < $1.start }
    }
}
