import Testing

@testable import SDUIProxyCore

/// A head's plain field lines read in one pass (``LineReader/nextPlainField()``), held to what the reading line by
/// line (``LineReader/next()``, then ``HTTPMessageSyntax/parseField(_:failing:)``) makes of the same bytes.
@Suite("Field lines read in one pass")
struct LineReaderTests {
    /// What a reading made of a head's field lines: each field as `name|value|padded`, or the reason it refused them.
    private typealias Reading = Result<[String], HTTPParseFailure>

    private static func describe(
        _ field: (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, padded: Bool)
    )
        -> String
    {
        "\(String(decoding: field.name, as: UTF8.self))|\(String(decoding: field.value, as: UTF8.self))|\(field.padded)"
    }

    /// The field lines of `head` (no start line, no final blank line), each with whether its value was padded:
    /// read one line at a time, as they were before plain lines were read in one pass, or, with `plainLinesFirst`,
    /// as the parsers read them (a plain line in one pass, any other line by line).
    private static func read(_ head: [UInt8], plainLinesFirst: Bool) -> Reading {
        head.withUnsafeBytes { bytes in
            var lines = LineReader(bytes: bytes)
            var fields: [String] = []
            do throws(HTTPParseFailure) {
                while true {
                    if plainLinesFirst, let plain = lines.nextPlainField() {
                        fields.append(describe(plain))
                        continue
                    }
                    guard let line = lines.next() else { break }
                    let field = try HTTPMessageSyntax.parseField(
                        UnsafeRawBufferPointer(rebasing: bytes[line]),
                        failing: .network
                    )
                    fields.append(describe(field))
                }
            } catch {
                return .failure(error)
            }
            guard lines.isValid else {
                return .failure(HTTPParseFailure(kind: .network, reason: "a bare line feed in the head"))
            }
            return .success(fields)
        }
    }

    private static func lineByLine(_ head: [UInt8]) -> Reading { read(head, plainLinesFirst: false) }

    private static func plainLinesFirst(_ head: [UInt8]) -> Reading { read(head, plainLinesFirst: true) }

    /// The field lines of `head` as a backend's response head is read, plain lines in one pass.
    private static func asParsed(_ head: [UInt8]) -> Reading {
        head.withUnsafeBytes { bytes in
            var lines = LineReader(bytes: bytes)
            do throws(HTTPParseFailure) {
                let (_, parsed) = try HTTPMessageSyntax.parseFieldLines(&lines, failing: .network)
                var fields: [String] = []
                parsed.forEachField { name, value in
                    fields.append("\(String(decoding: name, as: UTF8.self))|\(String(decoding: value, as: UTF8.self))")
                }
                return .success(fields)
            } catch {
                return .failure(error)
            }
        }
    }

    /// `lineByLine` without whether a value was padded, which the parsed fields do not keep.
    private static func unpadded(_ reading: Reading) -> Reading {
        reading.map { $0.map { String($0[..<$0.lastIndex(of: "|")!]) } }
    }

    @Test("plain lines of every length, with spaces around their values and obs-text in them, are read in one pass")
    func plainLines() throws {
        for nameLength in 1...33 {
            for valueLength in 0...33 {
                for (leading, trailing) in [(0, 0), (1, 0), (2, 0), (0, 1), (1, 2), (0, 2)] {
                    let name = (0..<nameLength).map { Array("Ab-9zZ0-x".utf8)[$0 % 9] }
                    let value = (0..<valueLength).map { Array("v \"/;=,é".utf8)[$0 % 9] }
                    let line =
                        name + Array(":".utf8) + Array(repeating: 0x20, count: leading) + value
                        + Array(repeating: 0x20, count: trailing)
                    // The line, then again as the head's last line, which has no line end of its own.
                    let head = line + [0x0D, 0x0A] + line
                    let plain = head.withUnsafeBytes { bytes -> [String]? in
                        var lines = LineReader(bytes: bytes)
                        var fields: [String] = []
                        while let field = lines.nextPlainField() { fields.append(Self.describe(field)) }
                        return lines.position == bytes.count + 1 ? fields : nil
                    }
                    let expected = try Self.lineByLine(head).get()
                    #expect(plain == expected, "\(String(decoding: line, as: UTF8.self))")
                }
            }
        }
    }

    @Test("every byte, at every place of a name or a value sixteen bytes at a time or fewer, is read as line by line")
    func everyByteInEveryPlace() {
        // Every byte value in every place of a 34-byte name or value, with and without a line after it: the line is
        // read as the line-by-line reading reads it (the next test varies the length, and so the step, instead).
        for place in 0..<34 {
            for value in 0...255 {
                let byte = UInt8(value)
                var name = Array(repeating: UInt8(ascii: "n"), count: 34)
                name[place] = byte
                var text = Array(repeating: UInt8(ascii: "v"), count: 34)
                text[place] = byte
                let plain = Array("X-Plain: v\r\n".utf8)
                for head in [
                    name + Array(": v".utf8), name + Array(": v\r\n".utf8) + plain,
                    Array("Name: ".utf8) + text, Array("Name: ".utf8) + text + [0x0D, 0x0A] + plain,
                    Array("N: ".utf8) + text.prefix(place + 1),
                ] {
                    let expected = Self.lineByLine(head)
                    #expect(Self.plainLinesFirst(head) == expected, "byte \(value) at \(place)")
                    #expect(Self.asParsed(head) == Self.unpadded(expected), "byte \(value) at \(place)")
                }
            }
        }
    }

    @Test("an odd byte in a name or a value of any length up to 40 is read as line by line, by each step that finds it")
    func oddBytesInEveryLength() {
        // With the line's length varied, each place of a name or a value is reached by the sixteen-byte step, the
        // eight-byte one and the byte-at-a-time one in turn.
        let odd: [UInt8] = [
            0x00, 0x09, 0x0A, 0x0D, 0x1F, 0x20, 0x2C, 0x2D, 0x2F, 0x30, 0x39, 0x3A, 0x40, 0x41, 0x5A, 0x5B, 0x5F,
            0x60, 0x61, 0x7A, 0x7B, 0x7E, 0x7F, 0x80, 0xC3, 0xFF,
        ]
        for length in 1...40 {
            for place in 0..<length {
                for byte in odd {
                    var name = Array(repeating: UInt8(ascii: "n"), count: length)
                    name[place] = byte
                    var text = Array(repeating: UInt8(ascii: "v"), count: length)
                    text[place] = byte
                    for head in [name + Array(": v".utf8), Array("N:".utf8) + text] {
                        let expected = Self.lineByLine(head)
                        #expect(Self.plainLinesFirst(head) == expected, "byte \(byte) at \(place) of \(length)")
                        #expect(Self.asParsed(head) == Self.unpadded(expected), "byte \(byte) at \(place) of \(length)")
                    }
                }
            }
        }
    }

    @Test(
        "a line that is not plain is left unread for the line-by-line reading, which gives it the same answer as ever",
        arguments: [
            "X_Custom: a", " Folded: a", "\tFolded: a", "Name : a", "Name:\ta", "Name: a\tb", "Name: a\u{7F}",
            "Name: a\rb", "Name: a\0b", "No colon", ":no-name", "Name: a\nNext: b", "Näme: a", "Name: a\r",
            "Name: a\r\r\nNext: b", "Name\r\n: a", "Name: a \t",
        ]
    )
    func otherLines(line: String) {
        let head = Array(line.utf8)
        let untouched = head.withUnsafeBytes { bytes in
            var lines = LineReader(bytes: bytes)
            return lines.nextPlainField() == nil && lines.position == 0
        }
        #expect(untouched)
        // After a plain line, read in one pass, the same line is read as it always was.
        let afterPlain = Array("Plain: a\r\n".utf8) + head
        #expect(Self.plainLinesFirst(afterPlain) == Self.lineByLine(afterPlain))
        #expect(Self.asParsed(afterPlain) == Self.unpadded(Self.lineByLine(afterPlain)))
    }

    @Test("random heads of plain and other lines are read as they were read line by line")
    func randomHeads() {
        // Bytes that make lines plain, and bytes that end, fold or spoil them.
        let plain = Array("abcXYZ019-".utf8)
        let other: [UInt8] = [0x20, 0x09, 0x0D, 0x0A, 0x3A, 0x5F, 0x7F, 0x00, 0x22, 0xC3, 0xA9]
        var random = SplitMix64(seed: 0x11E5)
        for _ in 0..<3_000 {
            var head: [UInt8] = []
            for line in 0..<Int(random.next() % 4 + 1) {
                if line > 0 { head += [0x0D, 0x0A] }
                head += (0..<Int(random.next() % 12 + 1)).map { _ in plain[Int(random.next() % 10)] }
                head.append(UInt8(ascii: ":"))
                for _ in 0..<Int(random.next() % 24) {
                    let pick = random.next() % 16
                    head.append(pick < 11 ? plain[Int(random.next() % 10)] : other[Int(random.next() % 11)])
                }
            }
            let expected = Self.lineByLine(head)
            #expect(Self.plainLinesFirst(head) == expected, "\(head.map { String($0, radix: 16) })")
            #expect(Self.asParsed(head) == Self.unpadded(expected), "\(head.map { String($0, radix: 16) })")
        }
    }
}
