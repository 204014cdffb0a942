import NIOCore
import NIOHTTP1

/// A stored response: what a hit writes to the client, as it was encoded, plus what freshness, validation
/// and purging need, all worked out once when the entry is made so a hit parses nothing.
///
/// Immutable and shared: one instance serves every hit and every coalesced waiter.
///
/// Small bodies are kept as exactly their bytes, behind the encoded head in the same array: a `ByteBuffer`'s
/// storage is a power of two (4 KiB for a 2.4 KB component), and a body read from the network is often a slice
/// of a larger read buffer. A hit copies such a body behind its head anyway (one write costs less than two), so
/// keeping it exact is free on the hit path, and one array per entry is one allocation when it is stored and
/// one object to free when it is evicted. Bodies over ``maximumExactBodyBytes`` stay in a buffer (without
/// spare capacity) that hits write without copying.
public final class CachedResponse: Sendable {
    public let status: HTTPResponseStatus
    /// The body as stored.
    public var storedBody: StoredBody {
        if let largeBody { .buffer(largeBody) } else { .exact(wire[headCount...]) }
    }
    /// The encoded head, then the body when it is kept exact: one array.
    private let wire: [UInt8]
    /// Where the encoded head ends in ``wire``.
    private let headCount: Int
    /// A body over ``maximumExactBodyBytes``, in the buffer it arrived in, which hits write as it is; nil when
    /// the body is kept exact, behind the encoded head.
    public let largeBody: ByteBuffer?
    /// The body's length in bytes.
    public let bodyLength: Int
    /// The strong validator clients see: the backend's `ETag`, or one computed from the content.
    public var etag: String { text(at: etagValue) }
    /// The backend's own validators, used to revalidate upstream (nil when it sent none).
    public var upstreamETag: String? { hasUpstreamETag ? etag : nil }
    public var lastModified: String? { lastModifiedValue.map(text(at:)) }
    /// Where the validators' values lie in ``encodedHead``. Only conditional requests and revalidations read
    /// them; kept as strings, they were objects of their own in every entry, to allocate and to free again when
    /// it is evicted, long after, from memory no longer in the processor's cache.
    private let etagValue: Range<Int>
    private let lastModifiedValue: Range<Int>?
    private let hasUpstreamETag: Bool

    private func text(at range: Range<Int>) -> String {
        encodedHead.withUnsafeBytes { String(decoding: UnsafeRawBufferPointer(rebasing: $0[range]), as: UTF8.self) }
    }
    /// When the response was stored, on the monotonic clock.
    public let storedAt: NIODeadline
    /// The response's corrected initial age, in seconds.
    public let initialAge: Int64
    /// How long the response is fresh, in seconds, counted from age 0.
    public var freshnessLifetime: Int64 { freshnessNanoseconds / 1_000_000_000 }
    /// How long the response is fresh, in nanoseconds, counted from age 0: what freshness is decided on. Kept in
    /// nanoseconds (in place of the seconds, so an entry is no larger) so that a soft purge can end it at the
    /// very moment of the purge (``softPurged(at:)``).
    private let freshnessNanoseconds: Int64
    /// The directives that decide for the response: its targeted field's (RFC 9213) when it had a valid one,
    /// else its `Cache-Control` (``StorageRules/directives(of:)``).
    public let directives: CacheControl
    /// How long past expiry the entry may be served while it is refreshed in the background.
    public let staleWhileRevalidate: Int64
    /// How long past expiry the entry may be served when the backend fails.
    public let staleIfError: Int64
    /// The request headers (lower-cased) named by the response's `Vary`, beyond those in the cache key.
    public let varyNames: [String]
    /// The values of ``varyNames`` in the request that produced this entry.
    public let variant: String
    /// Purge tags, from the configured tag header.
    public let tags: [String]
    /// A content hash for Beagle 1.x clients (`beagle-hash`), formatted when a response carries it.
    public var contentHash: String { ContentHash.hex(contentHashValue) }
    /// The hash, computed when the entry was made if ``Metadata/computesContentHash`` asked for it (or the entry
    /// needed it for its `ETag`), or else from the body whenever it is asked for.
    private var contentHashValue: UInt64 { storedContentHash ?? ContentHash.hash64(body) }
    private let storedContentHash: UInt64?

    /// Whether `text` is ``contentHash`` (16 lower-case hex digits), compared without formatting the hash: a
    /// Beagle 1.x client sends it with every request.
    public func hasContentHash(_ text: String) -> Bool {
        guard text.utf8.count == 16 else { return false }
        let expected = contentHashValue
        return text.withContiguousUTF8 { bytes in
            var value: UInt64 = 0
            for byte in bytes {
                guard !(UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte), let digit = HTTPSyntax.hexValue(byte)
                else { return false }
                value = value << 4 | UInt64(digit)
            }
            return value == expected
        }
    }
    /// What the entry costs against the cache's byte budget.
    public let byteCost: Int
    /// The status line, the headers and `Content-Length`, encoded once: a hit writes these bytes, then its
    /// own `Age` and `X-Cache`, then the body. Shares its array with a body kept exact.
    public var encodedHead: ArraySlice<UInt8> { wire[..<headCount] }
    /// The length of ``encodedHead``.
    public var encodedHeadCount: Int { headCount }

    /// Calls `body` with the encoded head and, when the entry keeps the body as exact bytes, the body, where the
    /// entry keeps them. A hit writes both this way: taking them as slices (or out of ``storedBody``) retained
    /// the entry's array, which every loop serving the entry shares, so its count moved between the processors
    /// on every hit.
    public func withEncodedBytes(
        _ body: (_ head: UnsafeRawBufferPointer, _ exactBody: UnsafeRawBufferPointer?) -> Void
    ) {
        wire.withUnsafeBytes { all in
            body(
                UnsafeRawBufferPointer(rebasing: all[..<headCount]),
                largeBody == nil ? UnsafeRawBufferPointer(rebasing: all[headCount...]) : nil
            )
        }
    }

    /// The headers sent to clients, without `Age`, `X-Cache`, `Content-Length` and connection-level headers: read
    /// back from ``encodedHead``, where the entry keeps them.
    ///
    /// Only the answers that are not plain hits use them as a collection (a 304 to the client, Beagle 1.x's
    /// headers, a revalidation), and parsing a few hundred bytes the entry wrote itself costs those about what
    /// building their own headers does. Kept as strings, they cost every entry memory, and every miss and every
    /// eviction the strings' reference counts and allocations.
    public var headers: HTTPHeaders {
        encodedHead.withUnsafeBytes { head in
            var lines = LineReader(bytes: head)
            _ = lines.next()  // the status line
            // Lines this entry wrote from fields already parsed and checked: they parse again.
            guard var (_, headers) = try? HTTPMessageSyntax.parseFields(&lines, failing: .internalError) else {
                return HTTPHeaders()
            }
            headers.remove(name: "content-length")
            return headers
        }
    }

    /// Writes a status line and the stored header lines that `keep` accepts, given each line's name: for the
    /// answers that present the entry otherwise than as stored (a 304, Beagle 1.x's headers), without parsing the
    /// head or encoding headers again. No `Content-Length` is written unless `keep` accepts the stored one.
    public func writeHead(
        status: HTTPResponseStatus,
        keepingLines keep: (_ name: UnsafeRawBufferPointer) -> Bool,
        into buffer: inout ByteBuffer
    ) {
        HTTPWireFormat.writeStatusLine(status, into: &buffer)
        encodedHead.withUnsafeBytes { head in
            var lines = LineReader(bytes: head)
            _ = lines.next()  // the stored status line
            while let line = lines.next() {
                let text = UnsafeRawBufferPointer(rebasing: head[line])
                guard keep(UnsafeRawBufferPointer(rebasing: text[..<(text.firstIndex(of: UInt8(ascii: ":")) ?? 0)]))
                else { continue }
                buffer.writeBytes(text)
                buffer.writeStaticString("\r\n")
            }
        }
    }

    /// What a stored 200 says of ranges: it serves them.
    private static let acceptRangesLine: StaticString = "Accept-Ranges: bytes\r\n"

    /// The largest body kept as exactly its bytes.
    public static let maximumExactBodyBytes = 16 << 10

    public enum StoredBody: Sendable {
        /// Exactly the body's bytes, for bodies up to ``CachedResponse/maximumExactBodyBytes`` (in the array
        /// that holds ``CachedResponse/encodedHead``).
        case exact(ArraySlice<UInt8>)
        /// A larger body, in the buffer it arrived in.
        case buffer(ByteBuffer)
    }

    /// The body as a buffer, for the paths that are not plain hits (a small body is copied into a new one).
    public var body: ByteBuffer {
        switch storedBody {
        case .exact(let bytes): ByteBuffer(bytes: bytes)
        case .buffer(let buffer): buffer
        }
    }

    /// Everything about an entry that is not the response itself.
    public struct Metadata: Sendable {
        public var storedAt: NIODeadline
        public var initialAge: Int64
        public var freshnessLifetime: Int64
        /// Seconds of stale-if-error the route allows, used when the response itself gives none.
        public var configuredStaleIfError: Int64 = 0
        public var varyNames: [String] = []
        public var variant: String = ""
        /// The response header whose space-separated values are purge tags.
        public var tagHeader: String = "surrogate-key"
        /// What the stored head changes for clients: the request fields the key includes named in `Vary`, and
        /// the tag field left out (its tags still in ``CachedResponse/tags``). Applied here, once, so that a hit
        /// writes the stored head as it is.
        public var clientFields = ClientFacingFields()
        /// Whether the entry's ``CachedResponse/contentHash`` will be asked for on every hit (Beagle 1.x clients),
        /// so it is worth computing once when the entry is made.
        public var computesContentHash = true

        public init(storedAt: NIODeadline, initialAge: Int64, freshnessLifetime: Int64) {
            self.storedAt = storedAt
            self.initialAge = initialAge
            self.freshnessLifetime = freshnessLifetime
        }
    }

    /// Makes an entry from a backend response's status, headers and body; `directives` are the ones that decide
    /// for it (``StorageRules/directives(of:)``), without which the entry reads its `Cache-Control`. With `endToEndOnly`, the headers are as the backend
    /// sent them, and those that do not travel end to end (``UpstreamRequestBuilder/EndToEndFilter``) are
    /// dropped in the same pass.
    public convenience init(
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        body: ByteBuffer,
        metadata: Metadata,
        directives: CacheControl? = nil,
        endToEndOnly: Bool = false
    ) {
        self.init(
            status: status,
            fields: HTTPFieldLines(headers),
            body: body,
            metadata: metadata,
            directives: directives,
            endToEndOnly: endToEndOnly
        )
    }

    /// ``init(status:headers:body:metadata:directives:endToEndOnly:)`` for the fields as a backend sent them,
    /// read and copied where they lie.
    public init(
        status: HTTPResponseStatus,
        fields: HTTPFieldLines,
        body: ByteBuffer,
        metadata: Metadata,
        directives: CacheControl? = nil,
        endToEndOnly: Bool = false
    ) {
        let filter = endToEndOnly ? UpstreamRequestBuilder.EndToEndFilter(fields) : nil
        // A stored 200 serves byte ranges itself (RFC 9110 section 14.3), whatever the backend said of its own.
        let advertisesRanges = status == .ok
        // The backend's `Vary` lines give way to one that also names the request fields the key includes.
        let clientFields = metadata.clientFields
        var varyMembers: [String] = []
        if !clientFields.keyFields.isEmpty {
            fields.forEachListMember(of: "vary") { varyMembers.append(String(decoding: $0, as: UTF8.self)) }
        }
        let mergedVary = clientFields.vary(merging: varyMembers)
        func isStored(_ name: UnsafeRawBufferPointer) -> Bool {
            !HTTPSyntax.equalsIgnoringCase(bytes: name, "content-length")
                && !HTTPSyntax.equalsIgnoringCase(bytes: name, "age") && filter?.passes(name) != false
                && !(advertisesRanges && HTTPSyntax.equalsIgnoringCase(bytes: name, "accept-ranges"))
                && !(mergedVary != nil && HTTPSyntax.equalsIgnoringCase(bytes: name, "vary"))
                && !clientFields.hides(name)
        }
        // A first pass measures the head and reads what the entry needs from the lines it keeps; the second
        // writes them into the entry's one array, sized exactly.
        let code = String(status.code)
        var headBytes = Self.statusLineBytes(code: code, reason: status.reasonPhrase)
        var hasUpstreamETag = false
        var tags: [String] = []
        var keptDirectives = CacheControl()
        fields.forEachField { name, value in
            // Read whether or not clients see the field.
            if HTTPSyntax.sameIgnoringCase(bytes: name, metadata.tagHeader), filter?.passes(name) != false {
                // Tags are separated by spaces; lists of them (`a b, c`) by commas.
                tags += value.split(whereSeparator: { $0 == 0x20 || $0 == UInt8(ascii: ",") || $0 == 0x09 })
                    .map { String(decoding: $0, as: UTF8.self) }
            }
            guard isStored(name) else { return }
            headBytes += name.count + 2 + value.count + 2
            if HTTPSyntax.equalsIgnoringCase(bytes: name, "etag") {
                hasUpstreamETag = true
            } else if directives == nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "cache-control") {
                keptDirectives.read(value)
            }
        }
        if let mergedVary { headBytes += "Vary: ".utf8.count + mergedVary.utf8.count + 2 }
        // Hashing the body is a pass over every byte; a miss does it only when the hash will be used.
        let hash = !hasUpstreamETag || metadata.computesContentHash ? ContentHash.hash64(body) : nil
        let computedETag = hasUpstreamETag ? nil : ContentHash.entityTag(hash: hash!, length: body.readableBytes)
        if let computedETag { headBytes += "ETag: ".utf8.count + computedETag.utf8.count + 2 }
        let length = String(body.readableBytes)
        headBytes += "Content-Length: ".utf8.count + length.utf8.count + 2
        if advertisesRanges { headBytes += Self.acceptRangesLine.utf8CodeUnitCount }
        let keepsBodyExact = body.readableBytes <= Self.maximumExactBodyBytes

        var upstreamETagValue: Range<Int>?
        var computedETagValue = 0..<0
        var lastModifiedValue: Range<Int>?
        let wire = [UInt8](unsafeUninitializedCapacity: headBytes + (keepsBodyExact ? body.readableBytes : 0)) {
            array,
            count in
            var head = HeadWriter(into: UnsafeMutableRawBufferPointer(array))
            head.writeStatusLine(code: code, reason: status.reasonPhrase)
            fields.forEachField { name, value in
                guard isStored(name) else { return }
                // The value's place in the line about to be written: `name: value` and CRLF.
                let valueStart = head.position + name.count + 2
                if upstreamETagValue == nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "etag") {
                    upstreamETagValue = valueStart..<(valueStart + value.count)
                }
                if lastModifiedValue == nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "last-modified") {
                    lastModifiedValue = valueStart..<(valueStart + value.count)
                }
                head.writeLine(name, value)
            }
            if let mergedVary {
                mergedVary.withContiguousUTF8 { head.writeLine("Vary", UnsafeRawBufferPointer($0)) }
            }
            if let computedETag {
                computedETag.withContiguousUTF8 { tag in
                    let valueStart = head.position + "ETag: ".utf8.count
                    computedETagValue = valueStart..<(valueStart + tag.count)
                    head.writeLine("ETag", UnsafeRawBufferPointer(tag))
                }
            }
            if advertisesRanges { head.write(Self.acceptRangesLine) }
            length.withContiguousUTF8 { head.writeLine("Content-Length", UnsafeRawBufferPointer($0)) }
            precondition(head.position == headBytes, "the head was measured wrong")
            if keepsBodyExact {
                body.withUnsafeReadableBytes { head.write($0) }
            }
            count = head.position
        }
        self.hasUpstreamETag = hasUpstreamETag
        self.etagValue = upstreamETagValue ?? computedETagValue
        self.lastModifiedValue = lastModifiedValue
        self.storedContentHash = hash
        self.status = status
        self.bodyLength = body.readableBytes
        self.storedAt = metadata.storedAt
        self.initialAge = metadata.initialAge
        let (lifetime, overflow) = metadata.freshnessLifetime.multipliedReportingOverflow(by: 1_000_000_000)
        self.freshnessNanoseconds = overflow ? .max : lifetime
        let directives = directives ?? keptDirectives
        self.directives = directives
        let forbidsStale = directives.mustRevalidate || directives.proxyRevalidate || directives.noCache
        self.staleWhileRevalidate = forbidsStale ? 0 : directives.staleWhileRevalidate ?? 0
        // `s-maxage` carries `proxy-revalidate` for a shared cache (RFC 9111 section 5.2.2.10), so the route's
        // own `staleIfError` does not apply to it. Unlike `proxy-revalidate`, it leaves a `stale-*` directive in
        // the same response in force: `s-maxage=N, stale-while-revalidate=M` is how backends ask CDNs for
        // stale serving in so many words (RFC 5861), and reading it as a prohibition would defeat that.
        let configuredStaleIfError = directives.sharedMaxAge == nil ? metadata.configuredStaleIfError : 0
        self.staleIfError = forbidsStale ? 0 : directives.staleIfError ?? configuredStaleIfError
        self.varyNames = metadata.varyNames
        self.variant = metadata.variant
        self.tags = tags
        self.wire = wire
        self.headCount = headBytes
        self.largeBody = keepsBodyExact ? nil : Self.withoutSpareCapacity(body)
        // The fixed part approximates the entry's own object, key and table slot.
        self.byteCost = body.readableBytes + headBytes + 256
    }

    /// A copy of `entry` (sharing its bytes) that is fresh for `freshnessNanoseconds` instead.
    private init(_ entry: CachedResponse, freshnessNanoseconds: Int64) {
        self.hasUpstreamETag = entry.hasUpstreamETag
        self.etagValue = entry.etagValue
        self.lastModifiedValue = entry.lastModifiedValue
        self.storedContentHash = entry.storedContentHash
        self.status = entry.status
        self.bodyLength = entry.bodyLength
        self.storedAt = entry.storedAt
        self.initialAge = entry.initialAge
        self.freshnessNanoseconds = freshnessNanoseconds
        self.directives = entry.directives
        self.staleWhileRevalidate = entry.staleWhileRevalidate
        self.staleIfError = entry.staleIfError
        self.varyNames = entry.varyNames
        self.variant = entry.variant
        self.tags = entry.tags
        self.wire = entry.wire
        self.headCount = entry.headCount
        self.largeBody = entry.largeBody
        self.byteCost = entry.byteCost
    }

    /// This entry as a soft purge at `now` leaves it: stale from `now` on, so that its stale-while-revalidate and
    /// stale-if-error windows count from the purge; nil when it is stale already (a purge never makes an entry
    /// fresher, nor moves a window that has started).
    ///
    /// A copy rather than a mark on the entry: entries are immutable and shared by every loop serving them, and a
    /// mutable "purged at" would cost every entry a field and every hit an atomic read, for an event that is
    /// rare. The copy shares the entry's bytes (its array and any large body), so a soft purge allocates one small
    /// object per entry it reaches, and the lookup decides freshness on the one lifetime as before. Its `Age`
    /// goes on counting from when the response was stored.
    public func softPurged(at now: NIODeadline) -> CachedResponse? {
        let age = ageNanoseconds(at: now)
        guard age < freshnessNanoseconds else { return nil }
        return CachedResponse(self, freshnessNanoseconds: age)
    }

    /// The bytes of `HTTP/1.1 <code> <reason>` and CRLF.
    private static func statusLineBytes(code: String, reason: String) -> Int {
        "HTTP/1.1 ".utf8.count + code.utf8.count + 1 + reason.utf8.count + 2
    }

    /// A large body accumulated from reads can carry spare capacity; an exact copy keeps the byte budget honest.
    private static func withoutSpareCapacity(_ body: ByteBuffer) -> ByteBuffer {
        guard body.capacity > body.readableBytes + body.readableBytes / 4 + 1024 else { return body }
        var exact = ByteBufferAllocator().buffer(capacity: body.readableBytes)
        exact.writeImmutableBuffer(body)
        return exact
    }

    /// This entry's headers as a 304 from the backend updates them (RFC 9111 section 4.3.4): every header the
    /// 304 carries, as it was sent, replaces the entry's headers of that name, except those about the body's
    /// framing and encoding.
    ///
    /// An entity tag the proxy computed is dropped (the entry made from these headers computes it again, or keeps
    /// the one the 304 brought).
    public func headers(updatedBy notModifiedHeaders: HTTPHeaders) -> HTTPHeaders {
        var merged = headers
        if !hasUpstreamETag { merged.remove(name: "etag") }
        var replaced: Set<String> = []
        for (name, value) in notModifiedHeaders {
            let lowercased = name.lowercased()
            guard !Self.headersNotUpdated.contains(lowercased) else { continue }
            if replaced.insert(lowercased).inserted { merged.remove(name: name) }
            merged.add(name: name, value: value)
        }
        return merged
    }

    private static let headersNotUpdated: Set<String> = [
        "content-length", "content-encoding", "transfer-encoding", "content-range",
    ]

    // MARK: Age and freshness (RFC 9111 section 4.2)

    /// The response's current age in nanoseconds.
    @inline(__always)
    public func ageNanoseconds(at now: NIODeadline) -> Int64 {
        initialAge &* 1_000_000_000 &+ max(0, (now - storedAt).nanoseconds)
    }

    /// The current age in whole seconds, as the `Age` header carries it.
    @inline(__always)
    public func ageSeconds(at now: NIODeadline) -> Int64 {
        ageNanoseconds(at: now) / 1_000_000_000
    }

    /// Whether the response is still fresh at `now`.
    @inline(__always)
    public func isFresh(at now: NIODeadline) -> Bool {
        ageNanoseconds(at: now) < freshnessNanoseconds
    }

    /// Seconds of freshness left (0 when stale).
    public func remainingLifetime(at now: NIODeadline) -> Int64 {
        max(0, freshnessLifetime - ageSeconds(at: now))
    }

    /// How far past its lifetime the entry is, in nanoseconds (0 while fresh).
    public func stalenessNanoseconds(at now: NIODeadline) -> Int64 {
        max(0, ageNanoseconds(at: now) - freshnessNanoseconds)
    }

    /// Whether a stale entry may be served while a background refresh runs.
    public func mayServeWhileRevalidating(at now: NIODeadline) -> Bool {
        staleWhileRevalidate > 0 && stalenessNanoseconds(at: now) <= staleWhileRevalidate &* 1_000_000_000
    }

    /// Whether a stale entry may be served because the backend failed.
    public func mayServeOnError(at now: NIODeadline) -> Bool {
        staleIfError > 0 && stalenessNanoseconds(at: now) <= staleIfError &* 1_000_000_000
    }
}

/// Writes an entry's head into memory measured for it beforehand.
private struct HeadWriter {
    private let memory: UnsafeMutableRawBufferPointer
    private(set) var position = 0

    init(into memory: UnsafeMutableRawBufferPointer) {
        self.memory = memory
    }

    mutating func write(_ bytes: UnsafeRawBufferPointer) {
        UnsafeMutableRawBufferPointer(rebasing: memory[position..<(position + bytes.count)]).copyMemory(from: bytes)
        position += bytes.count
    }

    mutating func write(_ text: StaticString) {
        write(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    mutating func write(_ text: String) {
        text.withContiguousUTF8 { write(UnsafeRawBufferPointer($0)) }
    }

    /// `HTTP/1.1 <code> <reason>` and CRLF, as ``HTTPWireFormat/writeStatusLine(_:into:)`` writes it.
    mutating func writeStatusLine(code: String, reason: String) {
        write("HTTP/1.1 ")
        write(code)
        write(" ")
        write(reason)
        write("\r\n")
    }

    /// `name: value` and CRLF.
    mutating func writeLine(_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        write(name)
        write(": ")
        write(value)
        write("\r\n")
    }

    mutating func writeLine(_ name: StaticString, _ value: UnsafeRawBufferPointer) {
        write(name)
        write(": ")
        write(value)
        write("\r\n")
    }
}
