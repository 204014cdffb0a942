/// Character classes of HTTP (RFC 9110 section 5.6), for validating names and values the proxy accepts.
public enum HTTPSyntax {
    /// Whether `text` is a non-empty `token` (header names, directive names, methods).
    public static func isToken(_ text: some StringProtocol) -> Bool {
        text.withContiguousUTF8 { !$0.isEmpty && $0.allSatisfy(isTokenByte) }
    }

    /// Whether `text` can be a header field value: visible characters, spaces and tabs, no CR or LF.
    public static func isFieldValue(_ text: some StringProtocol) -> Bool {
        text.withContiguousUTF8 { bytes in bytes.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) } }
    }

    @inline(__always)
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// Whether `name` equals `lowercased` ignoring ASCII case, without allocating.
    @inline(__always)
    public static func equalsIgnoringCase(_ name: String, _ lowercased: StaticString) -> Bool {
        // Most names differ in length: that costs no walk over the text.
        guard name.utf8.count == lowercased.utf8CodeUnitCount else { return false }
        return name.withContiguousUTF8 { equalsIgnoringCase(bytes: $0, lowercased) }
    }

    /// Whether `bytes` spell `lowercased` ignoring ASCII case, for text read in place.
    @inlinable
    public static func equalsIgnoringCase<Bytes: Collection<UInt8>>(bytes: Bytes, _ lowercased: StaticString) -> Bool {
        let expected = UnsafeBufferPointer(start: lowercased.utf8Start, count: lowercased.utf8CodeUnitCount)
        guard bytes.count == expected.count else { return false }
        return zip(bytes, expected).allSatisfy { byte, lower in lowercasedASCII(byte) == lower }
    }

    /// `byte` with an ASCII capital letter made small; any other byte as it is.
    @inlinable @inline(__always)
    public static func lowercasedASCII(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }

    /// `bytes` without the optional whitespace (spaces and tabs, RFC 9110 section 5.6.3) at either end.
    @inlinable
    public static func trimmingOptionalWhitespace<Bytes: BidirectionalCollection<UInt8>>(
        _ bytes: Bytes
    ) -> Bytes.SubSequence {
        let isContent = { (byte: UInt8) in byte != UInt8(ascii: " ") && byte != UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: isContent), let last = bytes.lastIndex(where: isContent) else {
            return bytes[bytes.endIndex...]
        }
        return bytes[first...last]
    }

    /// Whether two strings are equal ignoring ASCII case, without allocating. (Not an overload of
    /// ``equalsIgnoringCase(_:_:)``: a literal would pick this one, the slower.)
    public static func sameIgnoringCase(_ name: String, _ other: String) -> Bool {
        guard name.utf8.count == other.utf8.count else { return false }
        return name.withContiguousUTF8 { name in
            other.withContiguousUTF8 { other in
                zip(name, other).allSatisfy { lowercasedASCII($0) == lowercasedASCII($1) }
            }
        }
    }

    /// ``sameIgnoringCase(_:_:)`` for a name read in place.
    public static func sameIgnoringCase(bytes name: UnsafeRawBufferPointer, _ other: String) -> Bool {
        other.withContiguousUTF8 { other in
            name.count == other.count && zip(name, other).allSatisfy { lowercasedASCII($0) == lowercasedASCII($1) }
        }
    }

    /// Whether `name` is a hop-by-hop header (``hopByHopHeaders``), in any letter case, without allocating.
    public static func isHopByHop(_ name: String) -> Bool {
        hopByHopHeaders.contains { equalsIgnoringCase(name, $0) }
    }

    /// ``isHopByHop(_:)`` for a name read in place.
    public static func isHopByHop(_ name: UnsafeRawBufferPointer) -> Bool {
        hopByHopHeaders.contains { equalsIgnoringCase(bytes: name, $0) }
    }

    /// The value of an ASCII hex digit, or nil.
    @inline(__always)
    public static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Hop-by-hop headers (RFC 9110 section 7.6.1): they describe one connection and are never forwarded.
    public static let hopByHopHeaders: [StaticString] = [
        "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade",
    ]
}

/// A platform name as clients send it in the platform header (`IOS`, `ANDROID`, `WEB`).
public enum PlatformValue {
    /// Whether `value` is 1 to 32 letters, digits, `-` or `_`: short, so hostile values cannot bloat cache keys.
    public static func isValid(_ value: some StringProtocol) -> Bool {
        let bytes = value.utf8
        return !bytes.isEmpty && bytes.count <= 32
            && bytes.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    true
                default: false
                }
            }
    }
}
