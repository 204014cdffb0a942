/// The backend's identifier for an entity a client created offline, read from the create's answer. Only a sane
/// token (as ``LocalIdentifier``) or a JSON integer is taken: it goes into paths and JSON bodies as it is.
public struct RemoteIdentifier: Hashable, Sendable, CustomStringConvertible {
    /// As it goes into a path or a query.
    public let text: String
    /// Whether the backend gave it as a JSON number (it then replaces a string value as a number).
    public let isNumber: Bool

    /// `text` as an identifier, or nil when it is neither a sane token nor, with `isNumber`, an integer.
    public init?(_ text: String, isNumber: Bool = false) {
        if isNumber {
            let digits = text.utf8.first == UInt8(ascii: "-") ? text.utf8.dropFirst() : text.utf8[...]
            guard !digits.isEmpty, digits.count <= 20, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                return nil
            }
        } else {
            guard LocalIdentifier.isToken(text.utf8) else { return nil }
        }
        self.text = text
        self.isNumber = isNumber
    }

    /// Its JSON token: the number, or the string in quotes (a token needs no escaping).
    var jsonToken: [UInt8] {
        isNumber ? Array(text.utf8) : [UInt8(ascii: "\"")] + Array(text.utf8) + [UInt8(ascii: "\"")]
    }

    public var description: String { text }
}
