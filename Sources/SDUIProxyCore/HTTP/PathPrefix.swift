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
        guard target.hasPrefix(text) else { return false }
        let length = text.utf8.count
        if target.utf8.count == length || text.hasSuffix("/") || text.utf8.contains(UInt8(ascii: "?")) {
            return true
        }
        let next = target.utf8[target.utf8.index(target.utf8.startIndex, offsetBy: length)]
        return next == UInt8(ascii: "/") || next == UInt8(ascii: "?")
    }

    public var description: String { text }
}
