/// Character classes of HTTP (RFC 9110 section 5.6), for validating names and values the proxy accepts.
public enum HTTPSyntax {
    /// Whether `text` is a non-empty `token` (header names, directive names, methods).
    public static func isToken(_ text: some StringProtocol) -> Bool {
        text.withContiguousUTF8 { !$0.isEmpty && isToken(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// Whether `text` can be a header field value: visible characters, spaces and tabs, no CR or LF.
    public static func isFieldValue(_ text: some StringProtocol) -> Bool {
        text.withContiguousUTF8 { isFieldValue(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// Whether `bytes` can be a header field value (RFC 9110 section 5.5): visible characters, spaces, tabs and
    /// obs-text, nothing below a space but the tab, no DEL.
    ///
    /// Every field of every head passes through here, so it reads eight bytes at a time and looks at single
    /// bytes only in a word that holds a tab or a byte to refuse, and in the last few bytes.
    static func isFieldValue(bytes: UnsafeRawBufferPointer) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        var position = 0
        while position + 8 <= bytes.count {
            let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self))
            // Bytes below a space (a byte of 0x80 and up is never flagged), and DEL as a zero byte of `word ^ DEL`;
            // a borrow can flag a byte above a flagged one, which the byte-by-byte check below settles.
            let belowSpace = (word &- 0x20 &* ones) & ~word & highBits
            let delete = word ^ (0x7F &* ones)
            let deletes = (delete &- ones) & ~delete & highBits
            if belowSpace | deletes != 0 {
                for index in position..<(position + 8) where !isFieldValueByte(bytes[index]) { return false }
            }
            position += 8
        }
        // The last bytes: as the word that ends the value, overlapping the one before it, when there is one and it
        // holds nothing to look at more closely.
        if position < bytes.count, bytes.count >= 8 {
            let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: bytes.count - 8, as: UInt64.self))
            let belowSpace = (word &- 0x20 &* ones) & ~word & highBits
            let delete = word ^ (0x7F &* ones)
            let deletes = (delete &- ones) & ~delete & highBits
            if belowSpace | deletes == 0 { return true }
        }
        while position < bytes.count {
            guard isFieldValueByte(bytes[position]) else { return false }
            position += 1
        }
        return true
    }

    @inline(__always)
    static func isFieldValueByte(_ byte: UInt8) -> Bool {
        byte == 0x09 || (byte >= 0x20 && byte != 0x7F)
    }

    /// Whether every byte of `bytes` is a token character (an empty name passes: the caller checks it is not).
    ///
    /// Every field name of every head passes through here (the request parser, the backend's answers, the
    /// encoder), and nearly all are letters, digits and `-`: eight of those are recognised at a time, a name of
    /// four to seven as its two overlapping halves, and only a word holding another byte, and a name shorter
    /// than four, is looked at a byte at a time. Inlined where it is called: a call cost more than a short name's
    /// check (a pass-through GET checks 21 names, and inlining saved it 313 instructions).
    @inline(__always)
    static func isToken(bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        var position = 0
        while position + 8 <= count {
            if !isAlphanumericOrDash(
                UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self))
            ) {
                for index in position..<(position + 8) where !isTokenByte(bytes[index]) { return false }
            }
            position += 8
        }
        guard position < count else { return true }
        // The last bytes: as the word that ends the name, overlapping the one before it, when there is one; a
        // shorter name of four bytes or more as its first four and last four, which overlap.
        if count >= 8 {
            let last = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self))
            if isAlphanumericOrDash(last) { return true }
        } else if count >= 4, isAlphanumericOrDash(overlappingHalves(bytes, count: count)) {
            return true
        }
        while position < count {
            guard isTokenByte(bytes[position]) else { return false }
            position += 1
        }
        return true
    }

    /// The `count` (four to eight) bytes of `bytes` as one word: their first four and their last four, which overlap
    /// when there are fewer than eight. Every byte is in the word, so a test of each of its bytes (a byte class, a
    /// comparison ignoring case with bytes of the same length read the same way) is a test of them all, at once.
    /// `count` is the caller's, a constant where the bytes are a literal's: read from the buffer instead, it cost
    /// the comparisons with literals about 290 instructions a miss.
    @inlinable @inline(__always)
    static func overlappingHalves(_ bytes: UnsafeRawBufferPointer, count: Int) -> UInt64 {
        let first = UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self))
        let last = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self))
        return UInt64(first) | UInt64(last) &<< 32
    }

    /// The bytes of `word` that are not an ASCII letter, a digit or `-`, flagged as ``ByteWord`` flags bytes: zero
    /// when there is none, and the lowest flag exact (a byte of 0x80 or more is flagged, and may carry into the
    /// tests of the bytes above it).
    @inline(__always)
    static func nonAlphanumericOrDashBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        @inline(__always)
        func within(_ word: UInt64, _ low: UInt64, _ high: UInt64) -> UInt64 {
            (word &+ (0x80 - low) &* ones) & ~(word &+ (0x7F - high) &* ones) & highBits
        }
        // Below 0x80, adding `0x80 - low` sets a byte's high bit when it is at least `low`, and adding `0x7F - high`
        // when it is above `high`; neither carries into the next byte. Setting 0x20 makes every letter lower case
        // and moves no other byte into `a...z`.
        let letters = within(word | (0x20 &* ones), 0x61, 0x7A)
        let digits = within(word, 0x30, 0x39)
        // A byte of `word ^ "-"` that is zero: its low seven bits carry nothing into its high bit, nor does it
        // have one of its own.
        let dash = word ^ (0x2D &* ones)
        let dashes = ~(((dash & (0x7F &* ones)) &+ (0x7F &* ones)) | dash) & highBits
        return (~(letters | digits | dashes) | word) & highBits
    }

    /// The bytes of `vector` that are not an ASCII letter, a digit or `-`, each flagged exactly (``ByteVector``).
    @inline(__always)
    static func nonAlphanumericOrDashBytes(_ vector: SIMD16<UInt8>) -> ByteVector.Mask {
        // Setting 0x20 makes every letter lower case and moves no other byte into `a...z`.
        let letters = ByteVector.bytes(
            of: vector | SIMD16<UInt8>(repeating: 0x20),
            from: UInt8(ascii: "a"),
            through: UInt8(ascii: "z")
        )
        let digits = ByteVector.bytes(of: vector, from: UInt8(ascii: "0"), through: UInt8(ascii: "9"))
        return .!(letters .| digits .| ByteVector.bytes(of: vector, equalTo: UInt8(ascii: "-")))
    }

    /// Whether `byte` is an ASCII letter, a digit or `-`.
    @inline(__always)
    static func isAlphanumericOrDash(_ byte: UInt8) -> Bool {
        let lower = byte | 0x20
        return (lower >= UInt8(ascii: "a") && lower <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-")
    }

    /// Whether each of the eight bytes of `word` is an ASCII letter, a digit or `-`.
    @inline(__always)
    static func isAlphanumericOrDash(_ word: UInt64) -> Bool {
        nonAlphanumericOrDashBytes(word) == 0
    }

    /// Whether `byte` is a token character (RFC 9110 section 5.6.2, `tchar`): a bit per byte, in two words.
    @inline(__always)
    static func isTokenByte(_ byte: UInt8) -> Bool {
        // Below 64: `!#$%&'*+-.` and the digits. From 64 to 127: the letters and ``^_`|~``.
        let below64: UInt64 = 0x03FF_6CFA_0000_0000
        let from64: UInt64 = 0x57FF_FFFF_C7FF_FFFE
        let bit = UInt64(1) << UInt64(byte & 63)
        switch byte {
        case 0..<64: return below64 & bit != 0
        case 64..<128: return from64 & bit != 0
        default: return false
        }
    }

    /// Whether `name` equals `lowercased` ignoring ASCII case, without allocating.
    @inline(__always)
    public static func equalsIgnoringCase(_ name: String, _ lowercased: StaticString) -> Bool {
        // Most names differ in length: that costs no walk over the text.
        guard name.utf8.count == lowercased.utf8CodeUnitCount else { return false }
        return name.withContiguousUTF8 { equalsIgnoringCase(bytes: UnsafeRawBufferPointer($0), lowercased) }
    }

    /// ``equalsIgnoringCase(bytes:_:)`` for bytes that lie together, eight at a time: a 15-byte name such as
    /// `accept-encoding` cost 241 instructions a byte at a time, on every request that sends it.
    ///
    /// The lengths are compared where it is called: most names asked about differ in length.
    @inlinable @inline(__always)
    public static func equalsIgnoringCase(bytes: UnsafeRawBufferPointer, _ lowercased: StaticString) -> Bool {
        bytes.count == lowercased.utf8CodeUnitCount && sameLengthEqualsIgnoringCase(bytes, lowercased)
    }

    /// ``equalsIgnoringCase(bytes:_:)`` once the lengths are known to be equal.
    @inlinable
    static func sameLengthEqualsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ lowercased: StaticString) -> Bool {
        let count = lowercased.utf8CodeUnitCount
        let expected = lowercased.rawBytes
        guard count >= 8 else {
            guard count >= 4 else {
                for index in 0..<count where lowercasedASCII(bytes[index]) != expected[index] { return false }
                return true
            }
            // Four to seven bytes (`date`, `etag`, `expires`): one word each.
            return lowercasedASCII(word: overlappingHalves(bytes, count: count))
                == overlappingHalves(expected, count: count)
        }
        // Whole words, the last one overlapping the one before it when the count is not a multiple of eight.
        var offset = 0
        while true {
            let word = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            guard lowercasedASCII(word: word) == expected.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            else { return false }
            if offset == count - 8 { return true }
            offset = min(offset + 8, count - 8)
        }
    }

    /// ``equalsIgnoringCase(bytes:_:)`` for a slice of bytes read in place (a field's name among a head's).
    @inlinable @inline(__always)
    public static func equalsIgnoringCase(bytes: Slice<UnsafeRawBufferPointer>, _ lowercased: StaticString) -> Bool {
        equalsIgnoringCase(bytes: UnsafeRawBufferPointer(rebasing: bytes), lowercased)
    }

    /// The eight bytes of `word` with each ASCII capital letter made small, all at once: a byte's high bit is set
    /// by adding to its low seven bits where it is at least `A`, and where it is past `Z`; a byte at least `A`,
    /// not past `Z` and not above ASCII gets `0x20`. No addition carries into the next byte.
    @inlinable @inline(__always)
    public static func lowercasedASCII(word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let sevenBits = word & (0x7F &* ones)
        let atLeastA = sevenBits &+ ((0x80 - 0x41) &* ones)
        let pastZ = sevenBits &+ ((0x80 - 0x5B) &* ones)
        let capitals = atLeastA & ~pastZ & ~word & (0x80 &* ones)
        return word | (capitals >> 2)
    }

    /// Whether `bytes` spell `lowercased` ignoring ASCII case, for text read in place.
    @inlinable
    public static func equalsIgnoringCase<Bytes: Collection<UInt8>>(bytes: Bytes, _ lowercased: StaticString) -> Bool {
        let expected = UnsafeBufferPointer(start: lowercased.utf8Start, count: lowercased.utf8CodeUnitCount)
        guard bytes.count == expected.count else { return false }
        return zip(bytes, expected).allSatisfy { byte, lower in lowercasedASCII(byte) == lower }
    }

    /// Whether `bytes` spell `lowercased` ignoring ASCII case, for a name known only at run time.
    public static func equalsIgnoringCase<Bytes: Collection<UInt8>>(_ bytes: Bytes, lowercased: [UInt8]) -> Bool {
        bytes.count == lowercased.count && zip(bytes, lowercased).allSatisfy { lowercasedASCII($0) == $1 }
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
                sameIgnoringCase(bytes: UnsafeRawBufferPointer(name), UnsafeRawBufferPointer(other))
            }
        }
    }

    /// ``sameIgnoringCase(_:_:)`` for a name read in place.
    public static func sameIgnoringCase(bytes name: UnsafeRawBufferPointer, _ other: String) -> Bool {
        // Most names differ in length, which a native string knows without reaching for its bytes.
        guard name.count == other.utf8.count else { return false }
        return other.withContiguousUTF8 { other in sameIgnoringCase(bytes: name, UnsafeRawBufferPointer(other)) }
    }

    /// ``sameIgnoringCase(_:_:)`` for two names read in place.
    ///
    /// A word at a time, as ``sameLengthEqualsIgnoringCase(_:_:)`` reads them: whole words, the last overlapping
    /// the one before it, and a name of four to seven bytes as its two halves. A byte-by-byte `zip` cost a 15-byte
    /// name about 250 instructions, and a byte loop after the whole words about 40 for a 13-byte name.
    public static func sameIgnoringCase(bytes name: UnsafeRawBufferPointer, _ other: UnsafeRawBufferPointer) -> Bool {
        let count = name.count
        guard count == other.count else { return false }
        @inline(__always)
        func same(_ left: UInt64, _ right: UInt64) -> Bool {
            left == right || lowercasedASCII(word: left) == lowercasedASCII(word: right)
        }
        guard count >= 8 else {
            guard count >= 4 else {
                for index in 0..<count where lowercasedASCII(name[index]) != lowercasedASCII(other[index]) {
                    return false
                }
                return true
            }
            return same(overlappingHalves(name, count: count), overlappingHalves(other, count: count))
        }
        var offset = 0
        while true {
            guard
                same(
                    name.loadUnaligned(fromByteOffset: offset, as: UInt64.self),
                    other.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                )
            else { return false }
            if offset == count - 8 { return true }
            offset = min(offset + 8, count - 8)
        }
    }

    /// Whether `name` is a hop-by-hop header (``hopByHopHeaders``), in any letter case, without allocating.
    public static func isHopByHop(_ name: String) -> Bool {
        name.withContiguousUTF8 { isHopByHop(UnsafeRawBufferPointer($0)) }
    }

    /// ``isHopByHop(_:)`` for a name read in place.
    ///
    /// Every field a response is stored or forwarded with is asked this, and almost none is hop-by-hop: the
    /// name's length turns most away before any letter is compared.
    public static func isHopByHop(_ name: UnsafeRawBufferPointer) -> Bool {
        switch name.count {
        case 2: equalsIgnoringCase(bytes: name, "te")
        case 7: equalsIgnoringCase(bytes: name, "trailer") || equalsIgnoringCase(bytes: name, "upgrade")
        case 10: equalsIgnoringCase(bytes: name, "connection") || equalsIgnoringCase(bytes: name, "keep-alive")
        case 16: equalsIgnoringCase(bytes: name, "proxy-connection")
        case 17: equalsIgnoringCase(bytes: name, "transfer-encoding")
        case 18: equalsIgnoringCase(bytes: name, "proxy-authenticate")
        case 19: equalsIgnoringCase(bytes: name, "proxy-authorization")
        default: false
        }
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
    /// ``isHopByHop(_:)`` spells them out by length; a test holds the two to each other.
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
