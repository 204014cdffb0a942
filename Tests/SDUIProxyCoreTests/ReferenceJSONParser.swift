@testable import SDUIProxyCore

/// A second, plain JSON parser that builds a ``JSONValue`` tree, byte by byte and without shortcuts: the
/// reference the proxy's one-pass scan is checked against (which documents it accepts, and what it plans from
/// them). It follows the same grammar: RFC 8259, strict UTF-8, and ``JSONParser/maximumDepth`` levels at most.
struct ReferenceJSONParser {
    struct Failure: Error {
        var reason: String
        var offset: Int
    }

    private let bytes: [UInt8]
    private var index = 0

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        var parser = ReferenceJSONParser(bytes)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.failure("text after the document") }
        return value
    }

    /// The document's tree when it is a component (a root object with a non-empty string `_beagleComponent_`),
    /// nil when it is other JSON; throws when it is not JSON.
    static func component(_ bytes: [UInt8]) throws -> JSONValue? {
        let document = try parse(bytes)
        guard let type = document[ComponentDecoder.componentTypeKey]?.stringValue, !type.isEmpty else { return nil }
        return document
    }

    private mutating func value(depth: Int) throws -> JSONValue {
        guard depth < JSONParser.maximumDepth else { throw failure("too deep") }
        guard index < bytes.count else { throw failure("a value is missing") }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            index += 1
            var members: [String: JSONValue] = [:]
            skipWhitespace()
            if peek() == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                let key = try string()
                skipWhitespace()
                try expect(UInt8(ascii: ":"))
                skipWhitespace()
                members[key] = try value(depth: depth + 1)
                skipWhitespace()
                if try endOfList(closing: UInt8(ascii: "}")) { return .object(members) }
            }
        case UInt8(ascii: "["):
            index += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                if try endOfList(closing: UInt8(ascii: "]")) { return .array(elements) }
            }
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        default: return try number()
        }
    }

    /// After a member or an element: true at the list's end, false after a comma.
    private mutating func endOfList(closing: UInt8) throws -> Bool {
        let byte = peek()
        index += 1
        if byte == closing { return true }
        guard byte == UInt8(ascii: ",") else { throw failure("expected , or \(Character(Unicode.Scalar(closing)))") }
        return false
    }

    private mutating func string() throws -> String {
        try expect(UInt8(ascii: "\""))
        var utf8: [UInt8] = []
        while true {
            guard let byte = peek() else { throw failure("the document ends inside a string") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: utf8, as: UTF8.self) else { throw failure("not UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                guard let escaped = peek() else { throw failure("the document ends inside a string") }
                index += 1
                let simple: [UInt8: UInt8] = [
                    UInt8(ascii: "\""): 0x22, UInt8(ascii: "\\"): 0x5C, UInt8(ascii: "/"): 0x2F,
                    UInt8(ascii: "b"): 0x08, UInt8(ascii: "f"): 0x0C, UInt8(ascii: "n"): 0x0A,
                    UInt8(ascii: "r"): 0x0D, UInt8(ascii: "t"): 0x09,
                ]
                if let byte = simple[escaped] {
                    utf8.append(byte)
                } else if escaped == UInt8(ascii: "u") {
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code), bytes[index...].starts(with: Array(#"\u"#.utf8)) {
                        let mark = index
                        index += 2
                        let low = try hex4()
                        if (0xDC00..<0xE000).contains(low) {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            index = mark
                        }
                    }
                    utf8.append(contentsOf: String(Unicode.Scalar(code) ?? "\u{FFFD}").utf8)
                } else {
                    throw failure("a bad escape")
                }
            case 0..<0x20: throw failure("a control character in a string")
            default: utf8.append(byte)
            }
        }
    }

    private mutating func hex4() throws -> UInt32 {
        var code: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek(), let digit = Character(Unicode.Scalar(byte)).hexDigitValue else {
                throw failure("a bad \\u escape")
            }
            index += 1
            code = code << 4 | UInt32(digit)
        }
        return code
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func number() throws -> JSONValue {
        let start = index
        if peek() == UInt8(ascii: "-") { index += 1 }
        let integer = digits()
        guard integer > 0, integer == 1 || bytes[index - integer] != UInt8(ascii: "0") else {
            throw failure("a bad number")
        }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw failure("a bad number") }
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            index += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw failure("a bad number") }
        }
        return .number(Double(String(decoding: bytes[start..<index], as: UTF8.self)) ?? 0)
    }

    private mutating func digits() -> Int {
        let start = index
        while let byte = peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1 }
        return index - start
    }

    private mutating func literal(_ text: String, _ value: JSONValue) throws -> JSONValue {
        guard bytes[index...].starts(with: Array(text.utf8)) else { throw failure("a bad literal") }
        index += text.utf8.count
        return value
    }

    private mutating func expect(_ byte: UInt8) throws {
        guard peek() == byte else { throw failure("expected \(Character(Unicode.Scalar(byte)))") }
        index += 1
    }

    private func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while let byte = peek(), [0x20, 0x09, 0x0A, 0x0D].contains(byte) { index += 1 }
    }

    private func failure(_ reason: String) -> Failure { Failure(reason: reason, offset: index) }
}
