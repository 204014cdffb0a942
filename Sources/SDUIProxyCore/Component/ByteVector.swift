/// Sixteen bytes read as one vector and tested lane by lane: the wider step of the scanners that otherwise read
/// eight bytes at a time as a ``ByteWord``, for a component's strings (``JSONParser``) and a head's field lines
/// (``LineReader``). Most of what they scan (a screen's keys and values, a field's name) is shorter than sixteen
/// bytes, so one step settles it where words took two.
///
/// A test gives a mask with a lane set for each byte it flags; unlike a word's test, every lane is exact.
/// ``firstFlagged(_:)`` is where the first flagged byte is. The vectors' scalar types are spelled out at every
/// comparison: with `SIMD16(repeating:)` left to inference the comparisons took the standard library's generic
/// path, a lane at a time through memory, which cost a screen's scan 165,000 instructions instead of 27,000.
enum ByteVector {
    typealias Mask = SIMDMask<SIMD16<Int8>>

    /// The sixteen bytes from `offset` on, which the caller has checked lie before the end of its bytes.
    @inline(__always)
    static func load(_ base: UnsafeRawPointer, at offset: Int) -> SIMD16<UInt8> {
        base.loadUnaligned(fromByteOffset: offset, as: SIMD16<UInt8>.self)
    }

    @inline(__always)
    static func bytes(of vector: SIMD16<UInt8>, equalTo byte: UInt8) -> Mask {
        vector .== SIMD16<UInt8>(repeating: byte)
    }

    /// The bytes below `bound`, compared unsigned.
    @inline(__always)
    static func bytes(of vector: SIMD16<UInt8>, below bound: UInt8) -> Mask {
        vector .< SIMD16<UInt8>(repeating: bound)
    }

    /// The bytes from `low` to `high`, both included: one subtraction and one comparison, the bytes below `low`
    /// wrapping round past the range.
    @inline(__always)
    static func bytes(of vector: SIMD16<UInt8>, from low: UInt8, through high: UInt8) -> Mask {
        // The whole of 0...255 would need a bound of 256.
        assert(low <= high && high &- low < 255, "a range of bytes narrower than all of them")
        return bytes(of: vector &- SIMD16<UInt8>(repeating: low), below: high &- low &+ 1)
    }

    /// The bytes below 0x20 or from 0x80 up, the control characters and the bytes past ASCII: read as signed, they
    /// are the bytes below 0x20, so one comparison finds both.
    @inline(__always)
    static func controlOrNonASCIIBytes(_ vector: SIMD16<UInt8>) -> Mask {
        unsafeBitCast(vector, to: SIMD16<Int8>.self) .< SIMD16<Int8>(repeating: 0x20)
    }

    /// The first byte from `start` on, before `end`, that the tests flag, or `end`: sixteen bytes at a time with
    /// `vector` while sixteen are left, then eight at a time with `word` (a ``ByteWord`` test), then one at a time
    /// with `byte`. The three tests must flag the same bytes; the scanners give each its own.
    @inline(__always)
    static func firstFlaggedByte(
        in base: UnsafeRawPointer,
        from start: Int,
        to end: Int,
        vector: (SIMD16<UInt8>) -> Mask,
        word: (UInt64) -> UInt64,
        byte: (UInt8) -> Bool
    ) -> Int {
        var position = start
        while position &+ 16 <= end {
            let flagged = firstFlagged(vector(load(base, at: position)))
            if flagged < 16 { return position &+ flagged }
            position &+= 16
        }
        while position &+ 8 <= end {
            let flags = word(UInt64(littleEndian: base.loadUnaligned(fromByteOffset: position, as: UInt64.self)))
            if flags != 0 { return position &+ flags.trailingZeroBitCount &>> 3 }
            position &+= 8
        }
        while position < end, !byte(base.load(fromByteOffset: position, as: UInt8.self)) { position &+= 1 }
        return position
    }

    /// The index of the first byte `mask` flags, or 16 when it flags none.
    @inline(__always)
    static func firstFlagged(_ mask: Mask) -> Int {
        // A set lane is all ones: read as two words, little-endian, the first set byte is the lowest.
        let words = unsafeBitCast(mask, to: SIMD2<UInt64>.self)
        let low = UInt64(littleEndian: words[0])
        if low != 0 { return low.trailingZeroBitCount &>> 3 }
        // Zero has 64 trailing zero bits: 8 + 8, no byte flagged.
        return 8 &+ UInt64(littleEndian: words[1]).trailingZeroBitCount &>> 3
    }
}
