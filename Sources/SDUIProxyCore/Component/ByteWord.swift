/// Eight bytes read as one little-endian word, and the tests of all eight at once that the scanners share: a
/// component's strings (``JSONParser``) and a request's target (``RequestTarget``).
///
/// Each test returns the bytes it flags as their top bits. Only the lowest flag is exact: a borrow only ever runs
/// upwards from a byte that is flagged rightly, so bits above it may be set and mean nothing. A result of zero
/// flags no byte, and `trailingZeroBitCount >> 3` is the first byte flagged.
enum ByteWord {
    static let ones: UInt64 = 0x0101_0101_0101_0101
    static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// The bytes of `word` equal to `byte`: `(x - ones) & ~x & highBits` flags the zero bytes of `x`.
    @inline(__always)
    static func bytes(of word: UInt64, equalTo byte: UInt8) -> UInt64 {
        let x = word ^ (UInt64(byte) &* ones)
        return (x &- ones) & ~x & highBits
    }

    /// The bytes of `word` below `bound`: `(x - n * ones) & ~x & highBits` flags those below n.
    @inline(__always)
    static func bytes(of word: UInt64, below bound: UInt8) -> UInt64 {
        (word &- UInt64(bound) &* ones) & ~word & highBits
    }

    /// The bytes of `word` that are not ASCII.
    @inline(__always)
    static func nonASCIIBytes(_ word: UInt64) -> UInt64 {
        word & highBits
    }
}
