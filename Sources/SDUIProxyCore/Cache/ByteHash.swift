/// A fast seeded hash of bytes, for tables whose collisions cost a little sharing, the wording of a
/// `Cache-Status` or a longer search, never a wrong answer: the shared header lines' slots (``CommonFieldLines``),
/// the count of responses per target (``StoredTargets``), and the tables that compare their keys too after it
/// (every ``CacheKey``, whose hash picks its shard and its slot in the shard, and the targets a loop found fresh
/// lately).
///
/// `Hasher` (SipHash-1-3) spent about 850 instructions on a stored response's 200 bytes of shared lines and 430 on
/// each of a miss's two looks at its target. This folds eight bytes at a time into the state with one 64-by-64-bit
/// multiply, whose two halves are mixed back together, as wyhash and rapidhash do. The seed is drawn at start-up, so
/// that a client cannot choose targets that collide.
public enum ByteHash {
    private static let seed = UInt64.random(in: .min ... .max)
    /// An odd constant with its bits spread (the golden ratio's fraction), as multiplicative hashes use.
    private static let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// The hash of `bytes`: the same for the same bytes, wherever they lie, for the life of the process.
    public static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        Int(truncatingIfNeeded: mix(fold(bytes, into: seed), seed))
    }

    /// The hash of `first` then `second`, each counted with its length, so that a byte moved from one to the other
    /// changes it: a cache key's target and variant.
    public static func hash(_ first: String, _ second: String) -> Int {
        first.withContiguousUTF8 { first in
            second.withContiguousUTF8 { second in
                let state = fold(UnsafeRawBufferPointer(second), into: fold(UnsafeRawBufferPointer(first), into: seed))
                return Int(truncatingIfNeeded: mix(state, seed))
            }
        }
    }

    /// `state` with `bytes` and their length folded in. The length is mixed, not only XORed in: an empty part
    /// must still change the state, or a pair with an empty side would hash as the other side alone.
    @inline(__always)
    private static func fold(_ bytes: UnsafeRawBufferPointer, into state: UInt64) -> UInt64 {
        let count = bytes.count
        var state = mix(state, UInt64(truncatingIfNeeded: count))
        var offset = 0
        while offset &+ 8 <= count {
            state = mix(state, word(bytes, at: offset))
            offset &+= 8
        }
        if offset < count {
            // The last bytes: the word that ends them, overlapping the one before, or what there is of a short one.
            var last: UInt64 = 0
            if count >= 8 {
                last = word(bytes, at: count &- 8)
            } else {
                for index in 0..<count { last |= UInt64(bytes[index]) &<< UInt64(index &* 8) }
            }
            state = mix(state, last)
        }
        return state
    }

    /// The bytes of `text`'s UTF-8, hashed where they lie.
    public static func hash(_ text: String) -> Int {
        text.withContiguousUTF8 { hash(UnsafeRawBufferPointer($0)) }
    }

    @inline(__always)
    private static func word(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt64 {
        UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// `state` with `word` folded in: their XOR multiplied by an odd constant as 128 bits, the halves folded
    /// together with XOR, so that every input bit reaches most output bits. Only a word equal to the secret state
    /// could zero it.
    @inline(__always)
    private static func mix(_ state: UInt64, _ word: UInt64) -> UInt64 {
        let product = (state ^ word).multipliedFullWidth(by: multiplier)
        return product.high ^ product.low
    }
}
