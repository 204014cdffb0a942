/// A `Content-Range` of a single-part 206 (RFC 9110 section 14.4): the bytes the message carries and the
/// length of the whole representation.
public struct ContentRange: Equatable, Sendable {
    /// The first byte carried.
    public let first: Int
    /// The last byte carried (inclusive, as the field writes it).
    public let last: Int
    /// The length of the whole representation.
    public let completeLength: Int

    public init?(first: Int, last: Int, completeLength: Int) {
        guard first >= 0, first <= last, last < completeLength else { return nil }
        self.first = first
        self.last = last
        self.completeLength = completeLength
    }

    /// `bytes first-last/length`. Nil for another unit, an unsatisfied range (`bytes */length`), an unknown length
    /// (`/*`: the parts of such a representation cannot be put together), or a range past the length.
    public init?(_ value: String) {
        let text = value.trimmingWhitespace()
        guard let space = text.firstIndex(of: " "),
            HTTPSyntax.equalsIgnoringCase(String(text[..<space]), "bytes")
        else { return nil }
        let rest = text[text.index(after: space)...].drop { $0 == " " }
        guard let dash = rest.firstIndex(of: "-"), let slash = rest.firstIndex(of: "/"), dash < slash,
            let first = Self.number(rest[..<dash]),
            let last = Self.number(rest[rest.index(after: dash)..<slash]),
            let length = Self.number(rest[rest.index(after: slash)...])
        else { return nil }
        self.init(first: first, last: last, completeLength: length)
    }

    /// The field's value.
    public var value: String { "bytes \(first)-\(last)/\(completeLength)" }

    /// How many bytes the part carries.
    public var count: Int { last - first + 1 }

    /// Digits only, short enough for an `Int`.
    private static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.count <= 18,
            text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return Int(text)
    }
}
