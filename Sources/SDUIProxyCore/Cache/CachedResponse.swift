import NIOCore
import NIOHTTP1
import Synchronization

/// A stored response: a representation (its status and header fields) in one or more forms (identity, and the
/// content codings it has been compressed into, each when a client first asked for it), plus what freshness,
/// validation and purging need, all worked out once when the entry is made so a hit parses nothing.
///
/// Immutable and shared: one instance serves every hit and every coalesced waiter. Each ``StoredForm`` keeps its
/// head encoded for HTTP/1.1 beside its body, so a hit in any form is one buffer and one write; the fields in
/// those heads are the same in every form but the form's own (`Content-Encoding`, `ETag`, `Content-Length`).
///
/// Every cached response holds one, so its stored properties are as narrow as they can be and declared so that
/// none leaves padding behind it: the one-byte ones after the identity form (which ends in one), then those of
/// eight bytes, then those of four and two. What most entries lack (`Vary` and tags) is kept out of line.
public final class CachedResponse: Sendable {
    /// The representation as the backend sent it (decoded, if it came in a content coding).
    public let identity: StoredForm
    /// The codings of ``encodedForms``, for negotiation without looking at the forms.
    public let codings: ContentNegotiation.Codings
    /// What the directives that decide for the response say of serving it stale or unchecked: its targeted
    /// field's (RFC 9213) when it had a valid one, else its `Cache-Control` (``StorageRules/directives(of:)``).
    public let revalidation: Revalidation
    private let flags: Flags
    /// The content codings the entry is also kept in (at most one form per coding): empty until compressed.
    public let encodedForms: [StoredForm]
    /// When the response was stored, on the monotonic clock.
    public let storedAt: NIODeadline
    /// The response's corrected initial age, in seconds.
    public let initialAge: Int64
    /// How long the response is fresh, in nanoseconds, counted from age 0: what freshness is decided on. Kept in
    /// nanoseconds (in place of the seconds, so an entry is no larger) so that a soft purge can end it at the
    /// very moment of the purge (``softPurged(at:)``).
    private let freshnessNanoseconds: Int64
    /// The content hash, when ``Flags/hasContentHash`` says it was computed.
    private let storedContentHash: UInt64
    /// The lines the entry shares with others (``CommonFieldLines``), and the variant's names and values and the
    /// purge tags when it has any: in one reference, so that an entry is no larger for either.
    private let extras: Extras
    /// How much of each form's stored lines is the same in every form: the shared fields of the entry's own (its
    /// times and cookies, ``CommonFieldLines/isOwn(_:)``), before each form's `Content-Encoding` and `ETag`.
    private let sharedHeadEnd: UInt32
    /// Where the value of `Last-Modified` lies in the identity form's head (among the shared fields, so in every
    /// form's alike); an end of 0 when there is none.
    private let lastModifiedStart: UInt32
    private let lastModifiedEnd: UInt32
    private let staleWhileRevalidateSeconds: Int32
    private let staleIfErrorSeconds: Int32
    /// The status, as its code: an `HTTPResponseStatus` takes 32 bytes in every entry, for a reason phrase that
    /// says nothing (RFC 9112 section 4: clients ignore it). Answers from the entry carry the code's standard
    /// phrase, or none for a code without one.
    private let statusCode: UInt16
    /// Taken by whoever sends the body to be compressed, so that one entry is compressed once at a time
    /// (``claimCompression()``).
    private let compressionClaim = Atomic<Bool>(false)

    public var status: HTTPResponseStatus { HTTPResponseStatus(statusCode: Int(statusCode)) }
    /// Whether the entry is a 200, which serves byte ranges itself (RFC 9110 section 14.3) whatever the backend
    /// said of its own, and says so in `Accept-Ranges: bytes`.
    public var advertisesRanges: Bool { statusCode == 200 }
    private var sharedHeadCount: Int { Int(sharedHeadEnd) }
    /// The body's length in bytes, in identity.
    public var bodyLength: Int { identity.bodyLength }
    /// The strong validator of the identity form: the backend's `ETag`, or one computed from the content. Each
    /// coded form's is derived from it (``ContentNegotiation/etag(_:for:)``).
    public var etag: String { identity.etag }
    /// The backend's own validators, used to revalidate upstream (nil when it sent none).
    public var upstreamETag: String? { flags.contains(.hasUpstreamETag) ? etag : nil }
    public var lastModified: String? {
        lastModifiedEnd == 0 ? nil : identity.text(at: Int(lastModifiedStart)..<Int(lastModifiedEnd))
    }

    /// The codings the body is still to be kept in, made when a client that would be sent one first asks for it
    /// (``negotiate(acceptEncoding:)``): those configured when it was stored, but for the ones kept and the ones
    /// tried already (a coding that did not make the body smaller, or failed, is not tried again).
    public var pendingCodings: ContentNegotiation.Codings { flags.pendingCodings }

    /// What an entry knows of itself in one bit, and its pending codings: in one byte, so that an entry is no
    /// larger for them.
    private struct Flags: OptionSet, Sendable {
        let rawValue: UInt8
        /// Its `ETag` is the backend's, not one computed from the content.
        static let hasUpstreamETag = Flags(rawValue: 1 << 0)
        /// ``storedContentHash`` holds the content hash.
        static let hasContentHash = Flags(rawValue: 1 << 1)
        /// Where ``pendingCodings`` lie: the codings' own bits, above the flags.
        private static let pendingShift: UInt8 = 2

        init(rawValue: UInt8) { self.rawValue = rawValue }

        /// These flags with `pending` for ``pendingCodings``.
        init(_ flags: Flags, pending: ContentNegotiation.Codings) {
            rawValue = flags.rawValue & ((1 << Self.pendingShift) - 1) | pending.rawValue << Self.pendingShift
        }

        var pendingCodings: ContentNegotiation.Codings {
            ContentNegotiation.Codings(rawValue: rawValue >> Self.pendingShift)
        }
    }

    /// The shared lines, alone or with what only entries with a `Vary` or purge tags hold.
    private enum Extras: Sendable {
        case common(CommonFieldLines)
        case varied(Variance)

        var common: CommonFieldLines {
            switch self {
            case .common(let lines): lines
            case .varied(let variance): variance.common
            }
        }

        var variance: Variance? {
            if case .varied(let variance) = self { variance } else { nil }
        }

        init(common: CommonFieldLines, varyNames: [String], variant: String, tags: [String]) {
            self =
                varyNames.isEmpty && variant.isEmpty && tags.isEmpty
                ? .common(common)
                : .varied(Variance(common: common, varyNames: varyNames, variant: variant, tags: tags))
        }
    }

    /// What only entries with a `Vary` or purge tags hold, beside their shared lines.
    private final class Variance: Sendable {
        let common: CommonFieldLines
        let varyNames: [String]
        let variant: String
        let tags: [String]

        init(common: CommonFieldLines, varyNames: [String], variant: String, tags: [String]) {
            self.common = common
            self.varyNames = varyNames
            self.variant = variant
            self.tags = tags
        }
    }

    /// The lines the entry shares with other entries: written before each form's own.
    public var commonLines: CommonFieldLines { extras.common }

    /// The whole head a hit in `coding` writes after its status line (for tests and diagnostics).
    public func encodedHead(_ coding: ContentCoding? = nil) -> [UInt8] {
        withForm(coding) { $0.encodedHead(common: commonLines) }
    }

    /// The form in `coding` (identity for nil, or a coding the entry is not kept in).
    public func form(_ coding: ContentCoding?) -> StoredForm {
        withForm(coding) { $0 }
    }

    /// Calls `body` with the form in `coding` (identity for nil, or a coding the entry is not kept in), borrowed
    /// where the entry keeps it: a hit that copied the form out would retain its array, shared by every loop.
    public func withForm<Result>(_ coding: ContentCoding?, _ body: (borrowing StoredForm) -> Result) -> Result {
        guard let coding else { return body(identity) }
        return encodedForms.withUnsafeBufferPointer { forms in
            for index in forms.indices where forms[index].coding == coding { return body(forms[index]) }
            return body(identity)
        }
    }
    /// How long the response is fresh, in seconds, counted from age 0.
    public var freshnessLifetime: Int64 { freshnessNanoseconds / 1_000_000_000 }

    /// How long past expiry the entry may be served while it is refreshed in the background.
    public var staleWhileRevalidate: Int64 { Int64(staleWhileRevalidateSeconds) }
    /// How long past expiry the entry may be served when the backend fails.
    public var staleIfError: Int64 { Int64(staleIfErrorSeconds) }
    /// The request headers (lower-cased) named by the response's `Vary`, beyond those in the cache key.
    public var varyNames: [String] { extras.variance?.varyNames ?? [] }
    /// The values of ``varyNames`` in the request that produced this entry.
    public var variant: String { extras.variance?.variant ?? "" }
    /// Purge tags, from the configured tag header.
    public var tags: [String] { extras.variance?.tags ?? [] }
    /// A content hash for Beagle 1.x clients (`beagle-hash`), formatted when a response carries it.
    public var contentHash: String { ContentHash.hex(contentHashValue) }
    /// The hash, computed when the entry was made if ``Metadata/computesContentHash`` asked for it (or the entry
    /// needed it for its `ETag`), or else from the body whenever it is asked for.
    private var contentHashValue: UInt64 {
        flags.contains(.hasContentHash) ? storedContentHash : ContentHash.hash64(body)
    }

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
    /// What a request whose `Accept-Encoding` is `field` (nil when absent) gets of this entry: `send`, the kept
    /// coding it is answered in (nil for identity), and `make`, the coding it would rather have when that one is
    /// still to be made (``pendingCodings``), for the caller to send the body to be compressed in. The request
    /// is answered in what is kept meanwhile: its first client is not kept waiting for a compression.
    ///
    /// An entry kept in identity alone, with nothing pending, answers without reading the field.
    public func negotiate(acceptEncoding field: String?) -> (send: ContentCoding?, make: ContentCoding?) {
        let offered = codings.union(pendingCodings)
        guard !offered.isEmpty, let preferred = ContentNegotiation.coding(forAcceptEncoding: field, available: offered)
        else { return (nil, nil) }
        guard pendingCodings.contains(ContentNegotiation.Codings(preferred)) else { return (preferred, nil) }
        return (ContentNegotiation.coding(forAcceptEncoding: field, available: codings), preferred)
    }

    /// Takes the entry's compression: true for one caller until ``releaseCompressionClaim()``, so that the
    /// requests that find a coding of the entry still to be made send its body to be compressed once, not once
    /// each.
    public func claimCompression() -> Bool {
        compressionClaim.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
    }

    /// Gives the compression back, when the body could not be sent to be compressed after all.
    public func releaseCompressionClaim() {
        compressionClaim.store(false, ordering: .relaxed)
    }

    /// What the entry costs against the cache's byte budget: every form's bytes, its common lines' and
    /// ``bookkeepingBytes``.
    public var byteCost: Int {
        encodedForms.reduce(identity.byteCost + commonLines.byteCost + Self.bookkeepingBytes) { $0 + $1.byteCost }
    }

    /// What an entry costs beyond its forms' bytes, whatever its size: its own object (128 bytes), its node and
    /// index slots in the cache's LRU store and its per-target count (about 95, with the tables' room to grow),
    /// its key (80 for a typical screen path) and the allocator's share of its allocations. Measured, not guessed:
    /// RSS per entry minus the forms' bytes, over 100,000 entries (the benchmarks' `memory` scenario), so that the
    /// byte budget is what the process holds. The lines entries share (``CommonFieldLines``) are counted in full by
    /// each entry that holds them, so a budget of entries from one backend holds some 5 % less than it could: an
    /// entry costs its header lines and bodies, whatever it shares.
    public static let bookkeepingBytes = 335

    /// The headers sent to clients in identity, without `Age`, `X-Cache`, `Content-Length` and connection-level
    /// headers: read back from the identity form's head, where the entry keeps them.
    ///
    /// Only the answers that are not plain hits use them as a collection (Beagle 1.x's headers, a revalidation),
    /// and reading a few hundred bytes the entry wrote itself costs those about what building their own headers
    /// does. Kept as strings, they cost every entry memory, and every miss and every eviction the strings'
    /// reference counts and allocations.
    public var headers: HTTPHeaders {
        var headers = HTTPHeaders()
        identity.forEachField(common: commonLines) { name, value in
            guard !HTTPSyntax.equalsIgnoringCase(bytes: name, "content-length") else { return }
            headers.add(name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
        }
        return headers
    }

    /// The purge tags one value of the tag field names: separated by spaces, lists of them (`a b, c`) by commas.
    public static func purgeTags(in value: UnsafeRawBufferPointer) -> [String] {
        value.split(whereSeparator: { $0 == 0x20 || $0 == UInt8(ascii: ",") || $0 == 0x09 })
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// The largest body kept as exactly its bytes.
    public static let maximumExactBodyBytes = 16 << 10

    /// The identity body as a buffer, for the paths that are not plain hits (a small body is copied into a new
    /// one).
    public var body: ByteBuffer { identity.body }

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
        endToEndOnly: Bool = false,
        encodedBodies: [EncodedBody] = []
    ) {
        self.init(
            status: status,
            fields: HTTPFieldLines(headers),
            body: body,
            metadata: metadata,
            directives: directives,
            endToEndOnly: endToEndOnly,
            encodedBodies: encodedBodies
        )
    }

    /// ``init(status:headers:body:metadata:directives:endToEndOnly:encodedBodies:)`` for the fields as a backend
    /// sent them, read and copied where they lie. `encodedBodies` are the body in content codings, each kept as a
    /// form of its own.
    public init(
        status: HTTPResponseStatus,
        fields: HTTPFieldLines,
        body: ByteBuffer,
        metadata: Metadata,
        directives: CacheControl? = nil,
        endToEndOnly: Bool = false,
        encodedBodies: [EncodedBody] = []
    ) {
        let filter = endToEndOnly ? UpstreamRequestBuilder.EndToEndFilter(fields) : nil
        // A stored 200 serves byte ranges itself (RFC 9110 section 14.3), whatever the backend said of its own.
        let advertisesRanges = status == .ok
        // The backend's `Vary` lines give way to one that also names the request fields the key includes, and
        // `Accept-Encoding` when the response may be kept compressed.
        // Read in place, not bound to a name: a copy retained each of its strings and arrays, on every miss.
        var varyMembers: [String] = []
        if !metadata.clientFields.keyFields.isEmpty || metadata.variesByEncoding {
            fields.forEachListMember(of: "vary") { varyMembers.append(String(decoding: $0, as: UTF8.self)) }
        }
        let mergedVary = metadata.clientFields.vary(
            merging: varyMembers,
            namingAcceptEncoding: metadata.variesByEncoding
        )
        // The lines every form shares; each form writes its own `Content-Encoding`, `ETag` and `Content-Length`.
        // The stored body is never in a coding the backend chose: the fetcher decodes it. The status line and a
        // 200's `Accept-Ranges` are written by whoever writes the head, from the status.
        func isShared(_ name: UnsafeRawBufferPointer) -> Bool {
            !HTTPSyntax.equalsIgnoringCase(bytes: name, "content-length")
                && !HTTPSyntax.equalsIgnoringCase(bytes: name, "age") && filter?.passes(name) != false
                && !HTTPSyntax.equalsIgnoringCase(bytes: name, "etag")
                && !HTTPSyntax.equalsIgnoringCase(bytes: name, "content-encoding")
                && !(advertisesRanges && HTTPSyntax.equalsIgnoringCase(bytes: name, "accept-ranges"))
                && !(mergedVary != nil && HTTPSyntax.equalsIgnoringCase(bytes: name, "vary"))
                && !metadata.clientFields.hides(name)
        }
        // A first pass measures the shared head and reads what the entry needs from the lines; the second writes
        // them: the lines other entries carry alike into a block they share (``CommonFieldLines``), the entry's own
        // into each form's one array, sized exactly.
        var ownBytes = 0
        var commonBytes = 0
        var upstreamETag: String?
        var tags: [String] = []
        var keptDirectives = CacheControl()
        // Bit n: the n-th of the first 64 fields is shared, as this pass finds; the writing pass reads it here.
        var sharedFields: UInt64 = 0
        var measured = 0
        // Most names differ from the tag field's in length, which settles them without reaching for its string.
        let tagHeaderCount = metadata.tagHeader.utf8.count
        fields.forEachField { name, value in
            defer { measured &+= 1 }
            // Read whether or not clients see the field.
            if name.count == tagHeaderCount, HTTPSyntax.sameIgnoringCase(bytes: name, metadata.tagHeader),
                filter?.passes(name) != false
            {
                tags += Self.purgeTags(in: value)
            }
            if upstreamETag == nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "etag") {
                upstreamETag = String(decoding: value, as: UTF8.self)
            }
            guard isShared(name) else { return }
            if measured < 64 { sharedFields |= 1 &<< UInt64(measured) }
            if CommonFieldLines.isOwn(name) {
                ownBytes += name.count + 2 + value.count + 2
            } else {
                commonBytes += name.count + 2 + value.count + 2
            }
            if directives == nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "cache-control") {
                keptDirectives.read(value)
            }
        }
        if let mergedVary { commonBytes += "Vary: ".utf8.count + mergedVary.utf8.count + 2 }
        // Hashing the body is a pass over every byte; a miss does it only when the hash will be used.
        let hash = upstreamETag == nil || metadata.computesContentHash ? ContentHash.hash64(body) : nil
        let etag = upstreamETag ?? ContentHash.entityTag(hash: hash!, length: body.readableBytes)

        var lastModifiedValue: Range<Int>?
        let (common, forms) = withUnsafeTemporaryAllocation(byteCount: ownBytes + commonBytes, alignment: 1) {
            memory in
            var own = HeadWriter(into: UnsafeMutableRawBufferPointer(rebasing: memory[..<ownBytes]))
            var commonWriter = HeadWriter(into: UnsafeMutableRawBufferPointer(rebasing: memory[ownBytes...]))
            var written = 0
            fields.forEachField { name, value in
                defer { written &+= 1 }
                guard written < 64 ? sharedFields & (1 &<< UInt64(written)) != 0 : isShared(name) else { return }
                guard CommonFieldLines.isOwn(name) else {
                    commonWriter.writeLine(name, value)
                    return
                }
                // The value's place in the line about to be written: `name: value` and CRLF.
                let valueStart = own.position + name.count + 2
                if lastModifiedValue == nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "last-modified") {
                    lastModifiedValue = valueStart..<(valueStart + value.count)
                }
                own.writeLine(name, value)
            }
            if let mergedVary { commonWriter.writeLine("Vary", mergedVary) }
            precondition(
                own.position == ownBytes && commonWriter.position == commonBytes,
                "the head was measured wrong"
            )
            let common = CommonFieldLines.interned(UnsafeRawBufferPointer(rebasing: memory[ownBytes...]))
            let ownLines = UnsafeRawBufferPointer(rebasing: memory[..<ownBytes])
            let identity = StoredForm(coding: nil, sharedHead: ownLines, etag: etag, body: body)
            return (common, (identity, Self.forms(of: encodedBodies, sharedHead: ownLines, etag: etag)))
        }
        self.identity = forms.0
        self.encodedForms = forms.1
        let codings = Self.codings(of: forms.1)
        self.codings = codings
        self.sharedHeadEnd = UInt32(ownBytes)
        var flags: Flags = []
        if upstreamETag != nil { flags.insert(.hasUpstreamETag) }
        if hash != nil { flags.insert(.hasContentHash) }
        self.flags = Flags(flags, pending: metadata.pendingCodings.subtracting(codings))
        self.lastModifiedStart = UInt32(lastModifiedValue?.lowerBound ?? 0)
        self.lastModifiedEnd = UInt32(lastModifiedValue?.upperBound ?? 0)
        self.storedContentHash = hash ?? 0
        self.statusCode = UInt16(clamping: status.code)
        self.storedAt = metadata.storedAt
        self.initialAge = metadata.initialAge
        let (lifetime, overflow) = metadata.freshnessLifetime.multipliedReportingOverflow(by: 1_000_000_000)
        self.freshnessNanoseconds = overflow ? .max : lifetime
        let directives = directives ?? keptDirectives
        self.revalidation = Revalidation(directives)
        let forbidsStale = directives.mustRevalidate || directives.proxyRevalidate || directives.noCache
        self.staleWhileRevalidateSeconds = Int32(clamping: forbidsStale ? 0 : directives.staleWhileRevalidate ?? 0)
        // `s-maxage` carries `proxy-revalidate` for a shared cache (RFC 9111 section 5.2.2.10), so the route's
        // own `staleIfError` does not apply to it. Unlike `proxy-revalidate`, it leaves a `stale-*` directive in
        // the same response in force: `s-maxage=N, stale-while-revalidate=M` is how backends ask CDNs for
        // stale serving in so many words (RFC 5861), and reading it as a prohibition would defeat that.
        let configuredStaleIfError = directives.sharedMaxAge == nil ? metadata.configuredStaleIfError : 0
        self.staleIfErrorSeconds = Int32(clamping: forbidsStale ? 0 : directives.staleIfError ?? configuredStaleIfError)
        self.extras = Extras(common: common, varyNames: metadata.varyNames, variant: metadata.variant, tags: tags)
    }

    /// The forms of `bodies`, after the shared head, each tagged as ``ContentNegotiation/etag(_:for:)`` says;
    /// one per coding, identity and `deflate` left out.
    private static func forms(
        of bodies: [EncodedBody],
        sharedHead: UnsafeRawBufferPointer,
        etag: String
    ) -> [StoredForm] {
        var forms: [StoredForm] = []
        for encoded in bodies
        where ContentCoding.stored.contains(encoded.coding) && !forms.contains(where: { $0.coding == encoded.coding }) {
            forms.append(
                StoredForm(
                    coding: encoded.coding,
                    sharedHead: sharedHead,
                    etag: ContentNegotiation.etag(etag, for: encoded.coding),
                    body: encoded.body
                )
            )
        }
        return forms
    }

    private static func codings(of forms: [StoredForm]) -> ContentNegotiation.Codings {
        ContentNegotiation.Codings(forms.lazy.compactMap(\.coding))
    }

    /// A copy of `entry` (sharing its forms) that is fresh for `freshnessNanoseconds` instead, and kept in
    /// `encodedForms` beside identity, with `pendingCodings` still to be made.
    private init(
        _ entry: CachedResponse,
        freshnessNanoseconds: Int64,
        encodedForms: [StoredForm],
        pendingCodings: ContentNegotiation.Codings
    ) {
        self.identity = entry.identity
        self.encodedForms = encodedForms
        let codings = Self.codings(of: encodedForms)
        self.codings = codings
        self.sharedHeadEnd = entry.sharedHeadEnd
        self.flags = Flags(entry.flags, pending: pendingCodings.subtracting(codings))
        self.lastModifiedStart = entry.lastModifiedStart
        self.lastModifiedEnd = entry.lastModifiedEnd
        self.storedContentHash = entry.storedContentHash
        self.statusCode = entry.statusCode
        self.storedAt = entry.storedAt
        self.initialAge = entry.initialAge
        self.freshnessNanoseconds = freshnessNanoseconds
        self.revalidation = entry.revalidation
        self.staleWhileRevalidateSeconds = entry.staleWhileRevalidateSeconds
        self.staleIfErrorSeconds = entry.staleIfErrorSeconds
        self.extras = entry.extras
    }

    /// This entry kept also in the codings of `bodies` (those it is already kept in replaced): a copy that shares
    /// the identity form and everything else, for a compression that finished after the entry was stored.
    /// `tried` are the codings that compression tried, kept or not: none of them is pending any more.
    public func adding(_ bodies: [EncodedBody], tried: ContentNegotiation.Codings = []) -> CachedResponse {
        let added = identity.storedLines.withUnsafeBytes { head in
            Self.forms(
                of: bodies,
                sharedHead: UnsafeRawBufferPointer(rebasing: head[..<sharedHeadCount]),
                etag: etag
            )
        }
        let kept = encodedForms.filter { form in !added.contains { $0.coding == form.coding } }
        return CachedResponse(
            self,
            freshnessNanoseconds: freshnessNanoseconds,
            encodedForms: kept + added,
            pendingCodings: pendingCodings.subtracting(tried)
        )
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
        return CachedResponse(
            self,
            freshnessNanoseconds: age,
            encodedForms: encodedForms,
            pendingCodings: pendingCodings
        )
    }

    /// This proxy's `Via` member on the responses it forwards: the backend answers it in HTTP/1.1.
    public static let ownVia = "1.1 sdui-proxy"
    /// ``ownVia`` as a whole field line, for the heads written from bytes.
    public static let ownViaLine: StaticString = "Via: 1.1 sdui-proxy\r\n"

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
