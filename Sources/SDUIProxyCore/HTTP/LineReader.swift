/// The CRLF-terminated lines of a head (without its final CRLFCRLF), as ranges; a bare LF makes it invalid.
struct LineReader {
    let bytes: UnsafeRawBufferPointer
    var position = 0
    private(set) var isValid = true

    init(bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// How many lines are left at most: one more than the line feeds ahead (the last line has none).
    var remainingLineCount: Int {
        guard position < bytes.count else { return 0 }
        var count = 1
        var from = position
        while let lineFeed = ByteSearch.firstIndex(of: 0x0A, in: bytes, from: from) {
            count += 1
            from = lineFeed + 1
        }
        return count
    }

    mutating func next() -> Range<Int>? {
        guard isValid, position < bytes.count || (position == 0 && bytes.isEmpty) else { return nil }
        let start = position
        guard let lineFeed = ByteSearch.firstIndex(of: 0x0A, in: bytes, from: start) else {
            position = bytes.count + 1
            return start..<bytes.count
        }
        guard lineFeed > start, bytes[lineFeed - 1] == 0x0D else {
            isValid = false
            return nil
        }
        position = lineFeed + 1
        return start..<(lineFeed - 1)
    }

    /// The next line when it is a plain field line, read in one pass: a name of ASCII letters, digits and `-`, a
    /// colon, spaces, then a value of visible ASCII, spaces and obs-text up to CR LF (or the end of the bytes),
    /// without its trailing spaces. Nil, with nothing read, at the end and for any other line: ``next()`` and
    /// ``HTTPMessageSyntax/parseField(_:failing:)`` read those a byte at a time, and give a bad one its exact error.
    ///
    /// Nearly every field a client or a backend sends is plain. Its line feed found by `memchr`, then its colon by
    /// `memchr` again, then its name and value checked each on its own, cost about 370 instructions a line. Here
    /// the name is checked up to its colon and the value up to its CR, sixteen bytes at a time, in one walk.
    mutating func nextPlainField() -> (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, padded: Bool)? {
        let count = bytes.count
        guard isValid, position < count, let base = bytes.baseAddress else { return nil }
        let start = position
        // The name ends at its first byte that is not a letter, digit or `-`, which must be the colon.
        let colon = Self.nameEnd(from: start, count: count, base: base)
        guard colon > start, colon < count, Self.byte(at: colon, in: base) == UInt8(ascii: ":") else { return nil }
        var valueStart = colon &+ 1
        while valueStart < count, Self.byte(at: valueStart, in: base) == 0x20 { valueStart &+= 1 }
        // The value ends at its first byte below a space (a tab among them) or DEL, which must be the CR of CR LF.
        let end = Self.valueEnd(from: valueStart, count: count, base: base)
        let next: Int
        if end == count {
            // The last line has no line end of its own: the head's blank line was cut off after it.
            next = count &+ 1
        } else {
            guard Self.byte(at: end, in: base) == 0x0D, end &+ 1 < count, Self.byte(at: end &+ 1, in: base) == 0x0A
            else { return nil }
            next = end &+ 2
        }
        var valueEnd = end
        while valueEnd > valueStart, Self.byte(at: valueEnd &- 1, in: base) == 0x20 { valueEnd &-= 1 }
        position = next
        return (
            UnsafeRawBufferPointer(start: base + start, count: colon &- start),
            UnsafeRawBufferPointer(start: base + valueStart, count: valueEnd &- valueStart),
            valueEnd < end
        )
    }

    /// The first byte from `start` on that is not an ASCII letter, a digit or `-`, or `count`: sixteen bytes at a
    /// time while sixteen are left (most names are shorter, so one step settles them), then eight, then one.
    @inline(__always)
    private static func nameEnd(from start: Int, count: Int, base: UnsafeRawPointer) -> Int {
        ByteVector.firstFlaggedByte(
            in: base,
            from: start,
            to: count,
            vector: HTTPSyntax.nonAlphanumericOrDashBytes,
            word: HTTPSyntax.nonAlphanumericOrDashBytes,
            byte: { !HTTPSyntax.isAlphanumericOrDash($0) }
        )
    }

    /// The first byte from `start` on that is below a space or DEL, or `count`, read as ``nameEnd(from:count:base:)``
    /// reads a name.
    @inline(__always)
    private static func valueEnd(from start: Int, count: Int, base: UnsafeRawPointer) -> Int {
        ByteVector.firstFlaggedByte(
            in: base,
            from: start,
            to: count,
            vector: { ByteVector.bytes(of: $0, below: 0x20) .| ByteVector.bytes(of: $0, equalTo: 0x7F) },
            word: { ByteWord.bytes(of: $0, below: 0x20) | ByteWord.bytes(of: $0, equalTo: 0x7F) },
            byte: { $0 < 0x20 || $0 == 0x7F }
        )
    }

    @inline(__always)
    private static func byte(at offset: Int, in base: UnsafeRawPointer) -> UInt8 {
        base.load(fromByteOffset: offset, as: UInt8.self)
    }
}
