import NIOCore

/// This cache's member of the `Cache-Status` field (RFC 9211) on one response: whether it was a hit, why the
/// request went to the backend and what came back, what was stored, and how long the response stays fresh.
///
/// Written straight into the response's bytes: a hit's member (`sdui-proxy; hit; ttl=42`) costs a few small
/// writes and no allocation.
public struct CacheStatus: Sendable, Equatable {
    /// Why the request went to the backend (RFC 9211 section 2.2).
    public enum Forward: String, Sendable {
        /// The cache does not take this request (a route that bypasses it).
        case bypass
        /// Nothing was stored for the target.
        case uriMiss = "uri-miss"
        /// The target has stored variants, none of them this request's.
        case varyMiss = "vary-miss"
        /// What was stored is stale: revalidated or refetched.
        case stale
        /// The request itself kept the cache out (`Authorization`, a client's `no-cache`).
        case request
    }

    /// Served from the cache without going to the backend.
    public var hit = false
    public var forward: Forward?
    /// The status the backend answered with, when it answered.
    public var forwardStatus: UInt?
    /// Seconds of freshness left of the response served or stored; negative when it was served stale.
    public var ttl: Int64?
    /// The backend's answer was stored.
    public var stored = false
    /// The request waited for another one's exchange instead of making its own.
    public var collapsed = false
    /// More about the outcome, a token (`stale-if-error`, an error kind).
    public var detail: String?

    public init(
        hit: Bool = false,
        forward: Forward? = nil,
        forwardStatus: UInt? = nil,
        ttl: Int64? = nil,
        stored: Bool = false,
        collapsed: Bool = false,
        detail: String? = nil
    ) {
        self.hit = hit
        self.forward = forward
        self.forwardStatus = forwardStatus
        self.ttl = ttl
        self.stored = stored
        self.collapsed = collapsed
        self.detail = detail
    }

    /// Whether this is a hit and nothing else but its ttl: what almost every response from the cache says.
    public var isPlainHit: Bool {
        hit && forward == nil && forwardStatus == nil && !stored && !collapsed && detail == nil
    }

    /// Whether this is a miss whose answer was stored with a ttl, and nothing else: what nearly every miss says.
    public var isPlainStoredMiss: Bool {
        forward == .uriMiss && forwardStatus != nil && ttl != nil && stored && !hit && !collapsed && detail == nil
    }

    /// Whether this is a forward on a route that bypasses the cache, answered, and nothing else: what a bypass
    /// route's every answer says.
    public var isPlainBypass: Bool {
        forward == .bypass && forwardStatus != nil && !hit && ttl == nil && !stored && !collapsed && detail == nil
    }

    /// Appends the member: `cacheName` (an sf-token, checked at load) and its parameters, in the order RFC
    /// 9211 lists them; `key`, when given, as an sf-string.
    public func write(cacheName: String, key: String?, into buffer: inout ByteBuffer) {
        guard key == nil else {
            forEachPiece(cacheName: cacheName, key: key) {
                buffer.writeString($0)
            } number: {
                buffer.writeString(String($0))
            } quoting: { key in
                Self.writeString(key, into: &buffer)
            }
            return
        }
        // Measured, then copied in one write: a write per piece cost a forwarded response a capacity and
        // uniqueness check for each of its six or so pieces.
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: maximumByteCount(cacheName: cacheName)) { out in
            copy(cacheName: cacheName, to: out, at: 0)
        }
    }

    /// The most bytes ``copy(cacheName:to:at:)`` writes: its text, and room for each number's every digit.
    public func maximumByteCount(cacheName: String) -> Int {
        var length = 0
        forEachPiece(cacheName: cacheName, key: nil) {
            length += $0.utf8.count
        } number: { _ in
            length += HTTPWireFormat.maximumDecimalDigits
        } quoting: { _ in
        }
        return length
    }

    /// Copies the member without a key to `out` at `offset`, which has room for
    /// ``maximumByteCount(cacheName:)`` bytes; returns the offset after it. Numbers are written as digits, with no
    /// string made for them.
    public func copy(cacheName: String, to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        var count = offset
        forEachPiece(cacheName: cacheName, key: nil) { piece in
            piece.withContiguousUTF8 { piece in
                count = HTTPWireFormat.copy(UnsafeRawBufferPointer(piece), to: out, at: count)
            }
        } number: { number in
            count = HTTPWireFormat.writeDecimal(number, to: out, at: count)
        } quoting: { _ in
        }
        return count
    }

    /// The member as a field value, for responses whose headers are composed. Appended to a string made once at
    /// its size: a buffer of its own, then a string copied out of it, cost every forwarded response two allocations.
    public func fieldValue(cacheName: String, key: String?) -> String {
        guard key == nil else {
            var buffer = ByteBuffer()
            write(cacheName: cacheName, key: key, into: &buffer)
            return String(buffer: buffer)
        }
        var value = ""
        value.reserveCapacity(cacheName.utf8.count + 64 + (detail?.utf8.count ?? 0))
        forEachPiece(cacheName: cacheName, key: nil) {
            value += $0
        } number: {
            value += String($0)
        } quoting: { _ in
        }
        return value
    }

    /// Calls `piece` with each piece of the member in order, `number` with its numbers (written in decimal), and
    /// `quoting` with the key, which is written as an sf-string.
    private func forEachPiece(
        cacheName: String,
        key: String?,
        _ piece: (String) -> Void,
        number: (Int64) -> Void,
        quoting: (String) -> Void
    ) {
        piece(cacheName)
        if hit { piece("; hit") }
        if let forward {
            piece("; fwd=")
            piece(forward.rawValue)
        }
        if let forwardStatus {
            piece("; fwd-status=")
            number(Int64(truncatingIfNeeded: forwardStatus))
        }
        if let ttl {
            piece("; ttl=")
            number(ttl)
        }
        if stored { piece("; stored") }
        if collapsed { piece("; collapsed") }
        if let key {
            piece("; key=")
            quoting(key)
        }
        if let detail {
            piece("; detail=")
            piece(detail)
        }
    }

    /// Whether `name` may name a cache in the field without quoting: an sf-token (RFC 9651 section 3.3.4).
    public static func isToken(_ name: String) -> Bool {
        guard let first = name.utf8.first,
            first == UInt8(ascii: "*")
                || (HTTPSyntax.lowercasedASCII(first) >= 0x61 && HTTPSyntax.lowercasedASCII(first) <= 0x7A)
        else {
            return false
        }
        return name.utf8.allSatisfy { HTTPSyntax.isTokenByte($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: "/") }
    }

    /// `text` as an sf-string: quoted, with `"` and `\` escaped and anything outside printable ASCII dropped.
    private static func writeString(_ text: String, into buffer: inout ByteBuffer) {
        buffer.writeStaticString("\"")
        for byte in text.utf8 where byte >= 0x20 && byte < 0x7F {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { buffer.writeInteger(UInt8(ascii: "\\")) }
            buffer.writeInteger(byte)
        }
        buffer.writeStaticString("\"")
    }
}
