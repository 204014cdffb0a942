/// The parser's tokens: strings, numbers and literals checked and stepped over, white space and the single bytes
/// between them. What the document's structure is and what a scan keeps of it is `JSONParser.swift`'s.
extension JSONParser {
    /// Steps over `true`, `false` or `null`.
    mutating func scanLiteral() throws(Failure) -> KeptValue {
        switch peek() {
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        default:
            throw failure("unexpected character")
        }
    }

    /// Checks a string (escapes, control characters, UTF-8) and steps over it without building it.
    ///
    /// Most strings are printable ASCII to their closing quote: those are read here, and everything else
    /// (escapes, other bytes, the document's end) by ``scanStringFrom(_:start:)``, which goes on from where this
    /// stopped.
    @inline(__always)
    mutating func scanString() throws(Failure) -> StringSpan {
        guard index < end, byte(at: index) == UInt8(ascii: "\"") else { return try scanStringAfterWhitespace() }
        let start = index &+ 1
        let position = firstSpecialStringByte(from: start)
        if position < end, byte(at: position) == UInt8(ascii: "\"") {
            index = position &+ 1
            // `position` only ever grows from `start`: the bounds need no check.
            return StringSpan(range: Range(uncheckedBounds: (start, position)), hasEscapes: false)
        }
        index = position
        return try scanStringFrom(position, start: start)
    }

    /// ``scanString()`` for a string with white space before it (a key after `, `), or for what is not a string.
    @inline(never)
    mutating func scanStringAfterWhitespace() throws(Failure) -> StringSpan {
        skipWhitespace()
        guard index < end, byte(at: index) == UInt8(ascii: "\"") else {
            if index < end { index &+= 1 }
            throw failure("expected a string")
        }
        return try scanString()
    }

    /// The rest of ``scanString()`` from `position` on, when the string's bytes before it are all plain.
    mutating func scanStringFrom(_ position: Int, start: Int) throws(Failure) -> StringSpan {
        var hasEscapes = false
        var hasNonASCII = false
        var position = position
        while true {
            position = firstSpecialStringByte(from: position)
            index = position
            guard let byte = next() else { throw failure("the document ends inside a string") }
            switch byte {
            case UInt8(ascii: "\""):
                let close = index &- 1
                if hasNonASCII,
                    String(validating: UnsafeRawBufferPointer(rebasing: bytes[start..<close]), as: UTF8.self) == nil
                {
                    throw failure("a string is not valid UTF-8")
                }
                return StringSpan(range: start..<close, hasEscapes: hasEscapes)
            case UInt8(ascii: "\\"):
                hasEscapes = true
                guard let escaped = next() else { throw failure("the document ends inside a string") }
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    break
                case UInt8(ascii: "u"):
                    for _ in 0..<4 {
                        guard let digit = next(), HTTPSyntax.hexValue(digit) != nil else {
                            throw failure("a bad \\u escape")
                        }
                    }
                default:
                    throw failure("a bad escape in a string")
                }
                position = index
            case 0..<0x20:
                throw failure("a control character in a string")
            case 0x80...:
                hasNonASCII = true
                position = index
            default:
                position = index
            }
        }
    }

    func text(of string: StringSpan) -> String {
        Self.text(of: string, in: bytes)
    }

    mutating func scanNumber() throws(Failure) {
        if peek() == UInt8(ascii: "-") { index &+= 1 }
        guard let first = peek(), Self.isDigit(first) else { throw failure("a bad number") }
        index &+= 1
        if first != UInt8(ascii: "0") { skipDigits() }
        if peek() == UInt8(ascii: ".") {
            index &+= 1
            guard let digit = peek(), Self.isDigit(digit) else { throw failure("a bad number") }
            skipDigits()
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            index &+= 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index &+= 1 }
            guard let digit = peek(), Self.isDigit(digit) else { throw failure("a bad number") }
            skipDigits()
        }
    }

    // MARK: Bytes

    /// The byte at `position`, which the caller has checked is before `end`.
    @inline(__always)
    func byte(at position: Int) -> UInt8 {
        base.load(fromByteOffset: position, as: UInt8.self)
    }

    @inline(__always)
    func peek() -> UInt8? {
        index < end ? byte(at: index) : nil
    }

    @inline(__always)
    mutating func next() -> UInt8? {
        guard index < end else { return nil }
        let byte = byte(at: index)
        index &+= 1
        return byte
    }

    /// The next byte that is not white space, stepped over: after a value, where a `,` or the container's end
    /// nearly always follows at once.
    @inline(__always)
    mutating func nextSkippingWhitespace() -> UInt8? {
        if index < end {
            let byte = byte(at: index)
            if byte > 0x20 {
                index &+= 1
                return byte
            }
        }
        skipWhitespace()
        return next()
    }

    @inline(__always)
    mutating func skipWhitespace() {
        // Most documents are written without any: one comparison settles it.
        guard index < end, byte(at: index) <= 0x20 else { return }
        while index < end {
            switch byte(at: index) {
            case 0x20, 0x09, 0x0A, 0x0D: index &+= 1
            default: return
            }
        }
    }

    /// The `:` after a member's key, with any white space around it; the common `"key":value` in two compares.
    @inline(__always)
    mutating func expectColon() throws(Failure) {
        if index &+ 1 < end, byte(at: index) == UInt8(ascii: ":"), byte(at: index &+ 1) > 0x20 {
            index &+= 1
            return
        }
        skipWhitespace()
        try expect(UInt8(ascii: ":"))
        skipWhitespace()
    }

    mutating func skipDigits() {
        while let byte = peek(), Self.isDigit(byte) { index &+= 1 }
    }

    @inline(__always)
    mutating func expect(_ byte: UInt8) throws(Failure) {
        guard next() == byte else { throw failure("expected \(Character(Unicode.Scalar(byte)))") }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(Failure) {
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        for byte in expected {
            guard next() == byte else { throw failure("a bad literal") }
        }
    }

    func failure(_ reason: String) -> Failure {
        Failure(reason: reason, offset: index)
    }

    /// The first byte from `position` on that ``isPlainStringByte(_:)`` turns away (a string's closing quote, an
    /// escape, a control character, a byte of a multi-byte character), or `end`.
    ///
    /// Sixteen bytes at a time (``ByteVector``) while sixteen are left: a screen's keys and values are mostly
    /// shorter, so one step settles them (eight at a time it took two, 2,800 instructions a miss more); then eight
    /// at a time as ``ByteWord`` reads them; the document's last seven bytes one at a time.
    @inline(__always)
    func firstSpecialStringByte(from position: Int) -> Int {
        ByteVector.firstFlaggedByte(
            in: base,
            from: position,
            to: end,
            vector: Self.specialStringBytes,
            word: Self.specialStringBytes,
            byte: { !Self.isPlainStringByte($0) }
        )
    }

    @inline(__always)
    static func isPlainStringByte(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    /// The bytes of `word` (loaded little-endian) that ``isPlainStringByte(_:)`` turns away, as ``ByteWord``
    /// flags them: zero when all eight are plain.
    @inline(__always)
    static func specialStringBytes(_ word: UInt64) -> UInt64 {
        ByteWord.nonASCIIBytes(word) | ByteWord.bytes(of: word, below: 0x20)
            | ByteWord.bytes(of: word, equalTo: UInt8(ascii: "\""))
            | ByteWord.bytes(of: word, equalTo: UInt8(ascii: "\\"))
    }

    /// The bytes of `vector` that ``isPlainStringByte(_:)`` turns away, each flagged exactly.
    @inline(__always)
    static func specialStringBytes(_ vector: SIMD16<UInt8>) -> ByteVector.Mask {
        ByteVector.bytes(of: vector, equalTo: UInt8(ascii: "\""))
            .| ByteVector.bytes(of: vector, equalTo: UInt8(ascii: "\\"))
            .| ByteVector.controlOrNonASCIIBytes(vector)
    }

    @inline(__always)
    static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
