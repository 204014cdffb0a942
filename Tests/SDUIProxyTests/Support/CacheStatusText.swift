import Foundation

/// A `Cache-Status` line or value as tests compare it: its ttl counts down while a test runs, so it is read apart
/// and written `ttl=<left>` in what is compared.
enum CacheStatusText {
    /// The ttl's seconds, negative when stale; nil when there is none.
    static func ttl(in text: String) -> Int? {
        guard let range = ttlRange(in: text) else { return nil }
        return Int(text[range].dropFirst(4))
    }

    /// `text` with its ttl written `ttl=<left>`.
    static func withTTLLeftOut(_ text: String) -> String {
        guard let range = ttlRange(in: text) else { return text }
        return text.replacingCharacters(in: range, with: "ttl=<left>")
    }

    private static func ttlRange(in text: String) -> Range<String.Index>? {
        guard let start = text.range(of: "ttl=") else { return nil }
        let digits = text[start.upperBound...].prefix { $0.isNumber || $0 == "-" }
        return start.lowerBound..<digits.endIndex
    }
}
