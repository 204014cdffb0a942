/// A path prefix that matches whole path segments, as purges and queue routes use it.
///
/// `/screens/c` covers `/screens/c`, `/screens/c/1` and `/screens/c?tab=2`, but not `/screens/cc/a`: a prefix
/// names a subtree, not a string. A prefix that ends in `/` covers what is below it; one that holds a `?` is
/// matched as a plain string (`/search?` covers every query of `/search`, `/search?q=` every `q`).
public struct PathPrefix: Sendable, Hashable, CustomStringConvertible {
    public let text: String

    public init(_ text: String) {
        self.text = text
    }

    /// Whether `target` (a path, with or without a query) is under this prefix.
    public func matches(_ target: String) -> Bool {
        target.withContiguousUTF8 { matches(bytes: $0) }
    }

    /// ``matches(_:)`` for a target's UTF-8 bytes, read where they are kept. Compared byte for byte: targets are
    /// normalised, and percent-encoded past ASCII.
    public func matches(bytes target: UnsafeBufferPointer<UInt8>) -> Bool {
        text.withContiguousUTF8 { prefix in
            guard ByteSearch.hasPrefix(target, prefix) else { return false }
            if target.count == prefix.count || prefix.last == UInt8(ascii: "/") || prefix.contains(UInt8(ascii: "?")) {
                return true
            }
            let next = target[prefix.count]
            return next == UInt8(ascii: "/") || next == UInt8(ascii: "?")
        }
    }

    public var description: String { text }
}
