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

    /// A strong entity tag for `body`: its hash and length, quoted.
    public static func entityTag(for body: ByteBuffer) -> String {
        let hash = String(fnv1a64(body), radix: 16)
        return "\"" + String(repeating: "0", count: 16 - hash.count) + hash + "-" + String(body.readableBytes, radix: 16)
            + "\""
    }
}
