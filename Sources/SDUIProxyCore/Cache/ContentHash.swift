import NIOCore

/// A stable 64-bit FNV-1a hash of bytes, for validators (`ETag`, `beagle-hash`) that must be the same on
/// every replica and across restarts, which rules out Swift's seeded `Hasher`.
public enum ContentHash {
    public static func fnv1a64(_ buffer: ByteBuffer) -> UInt64 {
        buffer.withUnsafeReadableBytes { bytes in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01b3
            }
            return hash
        }
    }

    /// `hash` as 16 lower-case hex digits.
    public static func hex(_ hash: UInt64) -> String {
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// A strong entity tag for a body: its hash and length, quoted.
    public static func entityTag(hash: UInt64, length: Int) -> String {
        "\"" + hex(hash) + "-" + String(length, radix: 16) + "\""
    }

    /// A strong entity tag for `body`.
    public static func entityTag(for body: ByteBuffer) -> String {
        entityTag(hash: fnv1a64(body), length: body.readableBytes)
    }
}
