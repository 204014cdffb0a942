import NIOCore
import NIOHTTP1

/// One form a stored response is kept in: identity, or one content coding of it (RFC 9110 section 8.4). Each
/// has its own body, length and entity tag; the entry's other header fields are the same in every form.
///
/// A form keeps its header fields encoded as HTTP/1.1 lines, as a cache of the entry's fields: a hit writes the
/// status line, then these as they are, then this hop's `Via` and the form's `Content-Length`, then its own `Age`
/// and `X-Cache`, then the body. What is the same in nearly every entry, or follows from the body, is not kept: the
/// status line and a 200's `Accept-Ranges: bytes` are written from the status, `Via` is a constant and
/// `Content-Length` the body's length, and a hit writes them as cheaply as it copies them (82 bytes less in every
/// entry). ``forEachField(_:)`` and ``writeLines(keepingLines:into:)`` give them as if they were kept.
///
/// Small bodies are kept as exactly their bytes, behind the head in the same array: a `ByteBuffer`'s storage is a power
/// of two (4 KiB for a 2.4 KB component), and a body read from the network is often a slice of a larger read buffer. A
/// hit copies such a body behind its head anyway (one write costs less than two), so keeping it exact is free on the
/// hit path, and one array per form is one allocation when it is stored and one object to free when it is evicted.
/// Bodies over ``CachedResponse/maximumExactBodyBytes`` stay in a buffer (without spare capacity) that hits write
/// without copying.
///
/// The head's lines are the ones the entry wrote, `name: value` and CRLF each, never folded: reading a field
/// back from them is a split at known separators, not a parse.
///
/// Its fields are declared widest first and narrow where they can be, ending in its one byte: every entry holds
/// one form inline, and packs its own one-byte fields after it.
public struct StoredForm: Sendable {
    /// The encoded head, then the body when it is kept exact: one array.
    private let wire: [UInt8]
    /// A body over ``CachedResponse/maximumExactBodyBytes``; nil when the body is kept exact, behind the encoded
    /// head. Boxed: inline, its buffer took 24 bytes of every entry, for the few with bodies that large.
    private let large: LargeBody?
    /// Where the encoded head ends in ``wire``.
    private let headEnd: UInt32
    /// Where the value of the form's `ETag` lies in the head. Only conditional requests read it; kept as a string,
    /// it was an object of its own in every entry, to allocate and to free again when it is evicted.
    private let etagStart: UInt32
    private let etagEnd: UInt32
    /// The form's content coding; nil for identity.
    public let coding: ContentCoding?

    /// A large body's buffer, on its own.
    private final class LargeBody: Sendable {
        let buffer: ByteBuffer
        init(_ buffer: ByteBuffer) { self.buffer = buffer }
    }

    /// A body over ``CachedResponse/maximumExactBodyBytes``, in a buffer that hits write as it is; nil when the
    /// body is kept exact, behind the encoded head.
    public var largeBody: ByteBuffer? { large?.buffer }

    /// The body's length in bytes.
    public var bodyLength: Int { large?.buffer.readableBytes ?? (wire.count - headCount) }

    private var headCount: Int { Int(headEnd) }
    private var etagValue: Range<Int> { Int(etagStart)..<Int(etagEnd) }

    /// Builds a form from the header lines it shares with the entry's other forms (`sharedHead`: every field but
    /// the form's own), its `etag`, and its `body`.
    ///
    /// The form's own lines follow the shared ones: `Content-Encoding` (unless identity) and `ETag`.
    init(coding: ContentCoding?, sharedHead: UnsafeRawBufferPointer, etag: String, body: ByteBuffer) {
        var headBytes = sharedHead.count
        if let coding { headBytes += "Content-Encoding: ".utf8.count + coding.rawValue.utf8.count + 2 }
        headBytes += "ETag: ".utf8.count + etag.utf8.count + 2
        let keepsBodyExact = body.readableBytes <= CachedResponse.maximumExactBodyBytes
        var etagValue = 0..<0
        self.wire = [UInt8](unsafeUninitializedCapacity: headBytes + (keepsBodyExact ? body.readableBytes : 0)) {
            array,
            count in
            var head = HeadWriter(into: UnsafeMutableRawBufferPointer(array))
            head.write(sharedHead)
            if let coding { head.writeLine("Content-Encoding", coding.rawValue) }
            etagValue = (head.position + "ETag: ".utf8.count)..<(head.position + "ETag: ".utf8.count + etag.utf8.count)
            head.writeLine("ETag", etag)
            precondition(head.position == headBytes, "the head was measured wrong")
            if keepsBodyExact { body.withUnsafeReadableBytes { head.write($0) } }
            count = head.position
        }
        self.coding = coding
        self.headEnd = UInt32(headBytes)
        self.etagStart = UInt32(etagValue.lowerBound)
        self.etagEnd = UInt32(etagValue.upperBound)
        self.large = keepsBodyExact ? nil : LargeBody(Self.withoutSpareCapacity(body))
    }

    /// The strong validator clients see for this form (weak if the backend's was).
    public var etag: String { text(at: etagValue) }

    /// The text at `range` of the head.
    func text(at range: Range<Int>) -> String {
        wire.withUnsafeBytes { String(decoding: UnsafeRawBufferPointer(rebasing: $0[range]), as: UTF8.self) }
    }

    /// The form's own header lines as kept, without the entry's common ones before them and the ones a hit writes
    /// after them (``writeHead(after:common:into:)``). Shares its array with a body kept exact.
    public var storedLines: ArraySlice<UInt8> { wire[..<headCount] }

    /// The whole head a hit writes after its status line: the entry's `common` lines, the stored lines, `Via` and
    /// `Content-Length` (for tests and diagnostics; a hit writes it in place with ``writeHead(after:common:into:)``).
    public func encodedHead(common: CommonFieldLines) -> [UInt8] {
        var buffer = ByteBuffer()
        writeHead(after: "", common: common, into: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// The length of ``encodedHead(common:)``.
    public func encodedHeadCount(common: CommonFieldLines) -> Int {
        common.lines.count + headCount + Self.trailer.utf8CodeUnitCount + Self.decimalDigits(bodyLength) + 2
    }

    /// At least ``encodedHeadCount(common:)``, without counting the length's digits: for sizing a hit's buffer.
    public func encodedHeadBound(common: CommonFieldLines) -> Int {
        common.lines.count + headCount + Self.trailer.utf8CodeUnitCount + 22
    }

    /// What follows the stored lines in every head: this hop's `Via` (RFC 9110 section 7.6.3; the member is
    /// ``CachedResponse/ownVia``, which a test holds this to), the last of the entry's `Via` lines, then the length's
    /// name; the length and CRLF end it.
    private static let trailer: StaticString = "Via: 1.1 sdui-proxy\r\nContent-Length: "

    @inline(__always)
    private static func decimalDigits(_ value: Int) -> Int {
        if value < 10_000 { return value < 10 ? 1 : value < 100 ? 2 : value < 1_000 ? 3 : 4 }
        var digits = 5
        var rest = value / 100_000
        while rest > 0 {
            rest /= 10
            digits += 1
        }
        return digits
    }

    /// Writes `value`, of `digits` decimal digits, at `start`.
    @inline(__always)
    private static func writeDecimal(_ value: Int, digits: Int, at start: UnsafeMutableRawPointer) {
        var rest = value
        var position = start + digits
        repeat {
            position -= 1
            position.storeBytes(of: UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10), as: UInt8.self)
            rest /= 10
        } while position > start
    }

    /// Appends `prefix`, the entry's `common` lines, the stored lines, this hop's `Via` and the form's
    /// `Content-Length` in one write: a hit's head after its status line (or with it, in `prefix`). Copied by
    /// pointer, measured once: the hit path.
    public func writeHead(after prefix: StaticString, common: CommonFieldLines, into buffer: inout ByteBuffer) {
        let length = bodyLength
        let digits = Self.decimalDigits(length)
        let ownCount = headCount
        let prefixCount = prefix.utf8CodeUnitCount
        let trailerCount = Self.trailer.utf8CodeUnitCount
        common.lines.withUnsafeBytes { commonLines in
            wire.withUnsafeBytes { all in
                let count = prefixCount + commonLines.count + ownCount + trailerCount + digits + 2
                _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { out in
                    var position = out.baseAddress!
                    position.copyMemory(from: prefix.utf8Start, byteCount: prefixCount)
                    position += prefixCount
                    if let lines = commonLines.baseAddress {
                        position.copyMemory(from: lines, byteCount: commonLines.count)
                        position += commonLines.count
                    }
                    if let own = all.baseAddress {
                        position.copyMemory(from: own, byteCount: ownCount)
                        position += ownCount
                    }
                    position.copyMemory(from: Self.trailer.utf8Start, byteCount: trailerCount)
                    position += trailerCount
                    Self.writeDecimal(length, digits: digits, at: position)
                    position += digits
                    position.storeBytes(of: UInt8(ascii: "\r"), as: UInt8.self)
                    (position + 1).storeBytes(of: UInt8(ascii: "\n"), as: UInt8.self)
                    return count
                }
            }
        }
    }

    /// Calls `body` with the lines a hit writes after the stored ones, as names and values: `Via` and
    /// `Content-Length`.
    private func forEachWrittenField(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void)
    {
        CachedResponse.ownVia.withContiguousUTF8 { body(("Via" as StaticString).rawBytes, UnsafeRawBufferPointer($0)) }
        let length = bodyLength
        let digits = Self.decimalDigits(length)
        withUnsafeTemporaryAllocation(byteCount: digits, alignment: 1) { memory in
            Self.writeDecimal(length, digits: digits, at: memory.baseAddress!)
            body(("Content-Length" as StaticString).rawBytes, UnsafeRawBufferPointer(memory))
        }
    }

    /// What the form costs in memory: its array, a large body's buffer, and the form itself.
    var byteCost: Int { wire.count + (large?.buffer.readableBytes ?? 0) + MemoryLayout<StoredForm>.size }

    /// Calls `body` with the stored lines and, when the form keeps the body as exact bytes, the body, where the
    /// form keeps them. A hit writes both this way: taking them as slices (or out of ``storedBody``) retained the
    /// form's array, which every loop serving the entry shares, so its count moved between the processors on
    /// every hit.
    public func withEncodedBytes(
        _ body: (_ storedLines: UnsafeRawBufferPointer, _ exactBody: UnsafeRawBufferPointer?) -> Void
    ) {
        wire.withUnsafeBytes { all in
            body(
                UnsafeRawBufferPointer(rebasing: all[..<headCount]),
                large == nil ? UnsafeRawBufferPointer(rebasing: all[headCount...]) : nil
            )
        }
    }

    public enum StoredBody: Sendable {
        /// Exactly the body's bytes, for bodies up to ``CachedResponse/maximumExactBodyBytes`` (in the array
        /// that holds ``StoredForm/storedLines``).
        case exact(ArraySlice<UInt8>)
        /// A larger body, in the buffer it is kept in.
        case buffer(ByteBuffer)
    }

    /// The body as stored.
    public var storedBody: StoredBody {
        if let large { .buffer(large.buffer) } else { .exact(wire[headCount...]) }
    }

    /// The body as a buffer, for the paths that are not plain hits (a small body is copied into a new one).
    public var body: ByteBuffer {
        switch storedBody {
        case .exact(let bytes): ByteBuffer(bytes: bytes)
        case .buffer(let buffer): buffer
        }
    }

    /// Calls `body` with each header field's name and value, in order: the entry's `common` lines, the stored
    /// lines, then `Via` and `Content-Length`.
    public func forEachField(
        common: CommonFieldLines,
        _ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void
    ) {
        common.lines.withUnsafeBytes { Self.forEachField(in: $0, body) }
        storedLines.withUnsafeBytes { Self.forEachField(in: $0, body) }
        forEachWrittenField(body)
    }

    /// Calls `body` with the name and value of each line of `head`, in order.
    private static func forEachField(
        in head: UnsafeRawBufferPointer,
        _ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void
    ) {
        var lines = LineReader(bytes: head)
        while let line = lines.next() {
            let text = UnsafeRawBufferPointer(rebasing: head[line])
            guard let colon = text.firstIndex(of: UInt8(ascii: ":")) else { continue }
            // The entry wrote `name: value`: one space after the colon.
            body(
                UnsafeRawBufferPointer(rebasing: text[..<colon]),
                UnsafeRawBufferPointer(rebasing: text[min(colon + 2, text.count)...])
            )
        }
    }

    /// Writes the header lines that `keep` accepts, given each line's name (the entry's `common` lines, `Via` and
    /// `Content-Length` among them): for the answers that present the form otherwise than as stored (a 304, Beagle
    /// 1.x's headers, a part), without parsing the head or encoding headers again. No `Content-Length` is written
    /// unless `keep` accepts the form's.
    public func writeLines(
        common: CommonFieldLines,
        keepingLines keep: (_ name: UnsafeRawBufferPointer) -> Bool,
        into buffer: inout ByteBuffer
    ) {
        func write(_ head: UnsafeRawBufferPointer) {
            var lines = LineReader(bytes: head)
            while let line = lines.next() {
                let text = UnsafeRawBufferPointer(rebasing: head[line])
                guard keep(UnsafeRawBufferPointer(rebasing: text[..<(text.firstIndex(of: UInt8(ascii: ":")) ?? 0)]))
                else { continue }
                buffer.writeBytes(text)
                buffer.writeStaticString("\r\n")
            }
        }
        common.lines.withUnsafeBytes { write($0) }
        storedLines.withUnsafeBytes { write($0) }
        forEachWrittenField { name, value in
            guard keep(name) else { return }
            buffer.writeBytes(name)
            buffer.writeStaticString(": ")
            buffer.writeBytes(value)
            buffer.writeStaticString("\r\n")
        }
    }

    /// A large body accumulated from reads can carry spare capacity; an exact copy keeps the byte budget honest.
    private static func withoutSpareCapacity(_ body: ByteBuffer) -> ByteBuffer {
        guard body.capacity > body.readableBytes + body.readableBytes / 4 + 1024 else { return body }
        var exact = ByteBufferAllocator().buffer(capacity: body.readableBytes)
        exact.writeImmutableBuffer(body)
        return exact
    }
}

/// Writes a head into memory measured for it beforehand.
struct HeadWriter {
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
        write(text.rawBytes)
    }

    mutating func write(_ text: String) {
        text.withContiguousUTF8 { write(UnsafeRawBufferPointer($0)) }
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

    mutating func writeLine(_ name: StaticString, _ value: String) {
        value.withContiguousUTF8 { writeLine(name, UnsafeRawBufferPointer($0)) }
    }
}
