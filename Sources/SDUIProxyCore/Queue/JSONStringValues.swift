/// The string values of a JSON text, object keys excepted, each with the bytes its token takes: what a queued
/// write's body is searched for identifiers by, and rewritten at.
///
/// It reads the whole text and checks its grammar (RFC 8259) as it goes: a body that is not exactly one JSON value
/// has no string values (it is never rewritten). Nesting deeper than ``maximumDepth`` is refused, so a hostile body
/// cannot exhaust the stack. A string is decoded (escapes and all) only when it could be an identifier, short enough
/// to be one; longer strings are checked and passed over.
public struct JSONStringValues {
    /// A string value: its token (quotes included) and its decoded text.
    public struct Value: Equatable, Sendable {
        public var token: Range<Int>
        public var text: String
    }

    /// The deepest nesting of arrays and objects read.
    public static let maximumDepth = 256

    /// The string values of `bytes` whose decoded text is at most `maximumLength` bytes of UTF-8, in order; nil
    /// when `bytes` are not one JSON value.
    public static func values(in bytes: [UInt8], maximumLength: Int = LocalIdentifier.maximumLength) -> [Value]? {
        var scanner = JSONStringValues(bytes: bytes, maximumLength: maximumLength)
        do {
            scanner.skipWhitespace()
            try scanner.value(depth: 0)
            scanner.skipWhitespace()
            guard scanner.position == bytes.count else { return nil }
            return scanner.found
        } catch {
            return nil
        }
    }

    struct NotJSON: Error {}

    let bytes: [UInt8]
    let maximumLength: Int
    var position = 0
    var found: [Value] = []

    init(bytes: [UInt8], maximumLength: Int = LocalIdentifier.maximumLength) {
        self.bytes = bytes
        self.maximumLength = maximumLength
    }

    mutating func value(depth: Int) throws(NotJSON) {
        guard depth <= Self.maximumDepth, let byte = peek() else { throw NotJSON() }
        switch byte {
        case UInt8(ascii: "{"): try object(depth: depth + 1)
        case UInt8(ascii: "["): try array(depth: depth + 1)
        case UInt8(ascii: "\""):
            let start = position
            if let text = try string() { found.append(Value(token: start..<position, text: text)) }
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default: try number()
        }
    }

    mutating func object(depth: Int) throws(NotJSON) {
        guard enter(closing: UInt8(ascii: "}")) else { return }
        repeat {
            // A key: checked, never a value.
            _ = try key(decoding: false)
            try value(depth: depth)
        } while try nextItem(closing: UInt8(ascii: "}"))
    }

    mutating func array(depth: Int) throws(NotJSON) {
        guard enter(closing: UInt8(ascii: "]")) else { return }
        repeat {
            try value(depth: depth)
        } while try nextItem(closing: UInt8(ascii: "]"))
    }

    /// Steps into the object or array at the position; false when it is empty (and read whole).
    mutating func enter(closing: UInt8) -> Bool {
        position += 1
        skipWhitespace()
        guard peek() == closing else { return true }
        position += 1
        return false
    }

    /// After a member or element: true when another follows (the comma read), false when the container closed.
    mutating func nextItem(closing: UInt8) throws(NotJSON) -> Bool {
        skipWhitespace()
        guard let separator = next() else { throw NotJSON() }
        if separator == closing { return false }
        guard separator == UInt8(ascii: ",") else { throw NotJSON() }
        skipWhitespace()
        return true
    }

    /// Reads a member's key and its colon, leaving the position at the value; the key's text when `decoding`.
    mutating func key(decoding: Bool = true) throws(NotJSON) -> String? {
        guard peek() == UInt8(ascii: "\"") else { throw NotJSON() }
        let text = try string(decoding: decoding)
        skipWhitespace()
        try expect(UInt8(ascii: ":"))
        skipWhitespace()
        return text
    }

    /// Reads a string token; its decoded text when `decoding` and it is short enough to matter, else nil.
    mutating func string(decoding: Bool = true) throws(NotJSON) -> String? {
        position += 1
        var decoded: [UInt8]? = decoding ? [] : nil
        while true {
            guard let byte = next() else { throw NotJSON() }
            switch byte {
            case UInt8(ascii: "\""):
                guard let decoded, decoded.count <= maximumLength else { return nil }
                // Invalid UTF-8 is refused rather than repaired: such a string names no identifier.
                return String(validating: decoded, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let escape = next() else { throw NotJSON() }
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded?.append(escape)
                case UInt8(ascii: "b"): decoded?.append(0x08)
                case UInt8(ascii: "f"): decoded?.append(0x0C)
                case UInt8(ascii: "n"): decoded?.append(0x0A)
                case UInt8(ascii: "r"): decoded?.append(0x0D)
                case UInt8(ascii: "t"): decoded?.append(0x09)
                case UInt8(ascii: "u"):
                    let scalar = try unicodeEscape()
                    decoded?.append(contentsOf: String(Character(scalar)).utf8)
                default: throw NotJSON()
                }
            case 0x00..<0x20:
                throw NotJSON()
            default:
                decoded?.append(byte)
            }
            // Past what could be an identifier: the rest is only checked.
            if let count = decoded?.count, count > maximumLength { decoded = nil }
        }
    }

    /// The scalar of a `\uXXXX` escape (the `u` read), a surrogate pair's as one; a lone surrogate is refused.
    mutating func unicodeEscape() throws(NotJSON) -> Unicode.Scalar {
        let high = try hexQuad()
        if (0xD800..<0xDC00).contains(high) {
            guard next() == UInt8(ascii: "\\"), next() == UInt8(ascii: "u") else { throw NotJSON() }
            let low = try hexQuad()
            guard (0xDC00..<0xE000).contains(low) else { throw NotJSON() }
            let value = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
            guard let scalar = Unicode.Scalar(value) else { throw NotJSON() }
            return scalar
        }
        guard let scalar = Unicode.Scalar(high) else { throw NotJSON() }
        return scalar
    }

    mutating func hexQuad() throws(NotJSON) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = next().flatMap(HTTPSyntax.hexValue) else { throw NotJSON() }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    mutating func number() throws(NotJSON) {
        if peek() == UInt8(ascii: "-") { position += 1 }
        guard let first = peek(), Self.isDigit(first) else { throw NotJSON() }
        position += 1
        if first != UInt8(ascii: "0") { skipDigits() }
        if peek() == UInt8(ascii: ".") {
            position += 1
            guard let digit = peek(), Self.isDigit(digit) else { throw NotJSON() }
            skipDigits()
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            position += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { position += 1 }
            guard let digit = peek(), Self.isDigit(digit) else { throw NotJSON() }
            skipDigits()
        }
    }

    mutating func literal(_ word: StaticString) throws(NotJSON) {
        let length = word.utf8CodeUnitCount
        guard position + length <= bytes.count else { throw NotJSON() }
        let matches = word.withUTF8Buffer { expected in
            expected.indices.allSatisfy { bytes[position + $0] == expected[$0] }
        }
        guard matches else { throw NotJSON() }
        position += length
    }

    mutating func expect(_ byte: UInt8) throws(NotJSON) {
        guard next() == byte else { throw NotJSON() }
    }

    func peek() -> UInt8? {
        position < bytes.count ? bytes[position] : nil
    }

    mutating func next() -> UInt8? {
        guard position < bytes.count else { return nil }
        defer { position += 1 }
        return bytes[position]
    }

    mutating func skipWhitespace() {
        while let byte = peek(),
            byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
                || byte == UInt8(ascii: "\t")
        {
            position += 1
        }
    }

    mutating func skipDigits() {
        while let byte = peek(), Self.isDigit(byte) { position += 1 }
    }

    static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
