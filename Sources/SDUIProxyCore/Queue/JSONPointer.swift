/// A JSON Pointer (RFC 6901): `/id`, `/order/0/id`; the empty pointer is the whole text. It names where a create's
/// local identifier is in its request body, or the backend's identifier in its answer.
public struct JSONPointer: Hashable, Sendable, CustomStringConvertible {
    /// The reference tokens, unescaped (`~1` is `/`, `~0` is `~`).
    public let tokens: [String]
    public let description: String

    /// `text` as a pointer, or nil when it is not one (it must be empty or start with `/`, and `~` must be followed
    /// by `0` or `1`).
    public init?(_ text: String) {
        guard text.isEmpty || text.hasPrefix("/") else { return nil }
        var tokens: [String] = []
        for raw in text.split(separator: "/", omittingEmptySubsequences: false).dropFirst() {
            var token = ""
            var escaping = false
            for character in raw {
                if escaping {
                    switch character {
                    case "0": token.append("~")
                    case "1": token.append("/")
                    default: return nil
                    }
                    escaping = false
                } else if character == "~" {
                    escaping = true
                } else {
                    token.append(character)
                }
            }
            if escaping { return nil }
            tokens.append(token)
        }
        self.tokens = tokens
        description = text
    }

    /// A scalar a pointer names.
    public enum Scalar: Equatable, Sendable {
        case string(String)
        /// A number, as written.
        case number(String)
    }

    /// The string or number this pointer names in the JSON `bytes`; nil when the bytes are not JSON, nothing is
    /// there, or what is there is another kind of value (an object, an array, a literal).
    public func scalar(in bytes: [UInt8]) -> Scalar? {
        // A pointer into a text that is not JSON names nothing, wherever the text goes wrong.
        guard JSONStringValues.values(in: bytes) != nil else { return nil }
        var scanner = JSONStringValues(bytes: bytes, maximumLength: 4096)
        scanner.skipWhitespace()
        return (try? scanner.lookUp(tokens[...], depth: 0)) ?? nil
    }
}

extension JSONStringValues {
    /// Reads the value at the scanner's position; the scalar `tokens` name within it, if any. Values off the path
    /// are read and passed over.
    mutating func lookUp(_ tokens: ArraySlice<String>, depth: Int) throws(NotJSON) -> JSONPointer.Scalar? {
        guard depth <= Self.maximumDepth, let byte = peek() else { throw NotJSON() }
        guard let token = tokens.first else {
            switch byte {
            case UInt8(ascii: "\""):
                return try string().map(JSONPointer.Scalar.string)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let start = position
                try number()
                return .number(String(decoding: bytes[start..<position], as: UTF8.self))
            default:
                try value(depth: depth)
                return nil
            }
        }
        switch byte {
        case UInt8(ascii: "{"):
            guard enter(closing: UInt8(ascii: "}")) else { return nil }
            repeat {
                if try key() == token { return try lookUp(tokens.dropFirst(), depth: depth + 1) }
                try value(depth: depth + 1)
            } while try nextItem(closing: UInt8(ascii: "}"))
            return nil
        case UInt8(ascii: "["):
            // RFC 6901: an index is digits without a leading zero.
            guard let index = Int(token), String(index) == token, index >= 0 else {
                try value(depth: depth)
                return nil
            }
            guard enter(closing: UInt8(ascii: "]")) else { return nil }
            var current = 0
            repeat {
                if current == index { return try lookUp(tokens.dropFirst(), depth: depth + 1) }
                try value(depth: depth + 1)
                current += 1
            } while try nextItem(closing: UInt8(ascii: "]"))
            return nil
        default:
            try value(depth: depth)
            return nil
        }
    }
}
