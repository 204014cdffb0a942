/// The identifier an offline client gave an entity it created before the backend knew of it (`tmp-7f3a`), which
/// later writes name until the backend's own identifier replaces it.
///
/// Only a sane token is one: 1 to 128 characters of `A-Z a-z 0-9 . _ ~ -` (URI's unreserved characters), so it is
/// the same in a path, a query and a JSON string, needs no escaping in any of them, and cannot be mistaken for
/// syntax.
public struct LocalIdentifier: Hashable, Sendable, CustomStringConvertible {
    public let value: String

    /// The longest identifier accepted.
    public static let maximumLength = 128

    /// `text` as an identifier, or nil when it is not a sane token.
    public init?(_ text: String) {
        guard Self.isToken(text.utf8) else { return nil }
        value = text
    }

    /// Whether `bytes` are 1 to ``maximumLength`` unreserved characters.
    static func isToken<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        let count = bytes.count
        guard count > 0, count <= maximumLength else { return false }
        return bytes.allSatisfy(RequestTarget.isUnreserved)
    }

    /// Why `text` is not an identifier, in words a client's 400 can carry.
    public static func refusal(of text: String) -> String {
        if text.isEmpty { return "the local identifier is empty" }
        if text.utf8.count > maximumLength {
            return "the local identifier is longer than \(maximumLength) characters"
        }
        return "the local identifier may only hold the characters A-Z a-z 0-9 . _ ~ -"
    }

    public var description: String { value }
}
