import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Finding bytes without parsing around them: a byte string in a body (whether a component mentions
/// `shouldPrefetch` at all), a delimiter in a head.
public enum ByteSearch {
    /// The index in `bytes` of the first `byte` at or after `start`, by `memchr`, which reads a word or a vector
    /// at a time where a loop in Swift reads a byte.
    @inline(__always)
    static func firstIndex(of byte: UInt8, in bytes: UnsafeRawBufferPointer, from start: Int = 0) -> Int? {
        guard start < bytes.count, let base = bytes.baseAddress,
            let found = memchr(base + start, Int32(byte), bytes.count - start)
        else { return nil }
        return base.distance(to: UnsafeRawPointer(found))
    }

    /// Whether `lhs` and `rhs` hold the same bytes, by `memcmp`: `elementsEqual` steps through both a byte at a
    /// time, through their iterators, which cost a stored response's shared lines 3,500 instructions to compare.
    @inline(__always)
    public static func same(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard let left = lhs.baseAddress, let right = rhs.baseAddress else { return true }
        return memcmp(left, right, lhs.count) == 0
    }

    /// Whether `bytes` begin with `prefix`, by `memcmp`: a path and a route's or a purge's prefix, both bytes.
    @inline(__always)
    public static func hasPrefix(_ bytes: UnsafeBufferPointer<UInt8>, _ prefix: UnsafeBufferPointer<UInt8>) -> Bool {
        prefix.count <= bytes.count
            && same(
                UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[..<prefix.count])),
                UnsafeRawBufferPointer(prefix)
            )
    }

    /// Whether `needle` occurs in `body`.
    ///
    /// The search runs `memchr` for the needle's first capital letter (its first byte when it has none) and
    /// compares the whole needle only where that byte is: a capital is rare in component JSON, where the
    /// needle's first byte, a quote, starts every string.
    public static func contains(_ needle: [UInt8], in body: ByteBuffer) -> Bool {
        guard !needle.isEmpty else { return false }
        let anchor = needle.firstIndex(where: { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) ?? 0
        return body.withUnsafeReadableBytes { bytes in
            guard bytes.count >= needle.count, let base = bytes.baseAddress else { return false }
            // A match at `start` has its anchor at `start + anchor`; these are the positions the anchor may take.
            var from = anchor
            let lastAnchor = bytes.count - needle.count + anchor
            while from <= lastAnchor {
                guard let found = memchr(base + from, Int32(needle[anchor]), lastAnchor - from + 1) else {
                    return false
                }
                let position = base.distance(to: UnsafeRawPointer(found))
                if memcmp(base + (position - anchor), needle, needle.count) == 0 { return true }
                from = position + 1
            }
            return false
        }
    }
}
