import NIOCore
import Testing

@testable import SDUIProxyCore

/// The byte classes every head is checked against, read a word at a time or from bit masks, held to their
/// definitions in RFC 9110 byte by byte.
@Suite("HTTP byte classes")
struct HTTPByteClassTests {
    /// `tchar` as RFC 9110 section 5.6.2 spells it.
    private static let tokenCharacters = Set(
        "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8
    )

    /// `field-vchar` or whitespace (RFC 9110 section 5.5): a tab, a space, VCHAR or obs-text.
    private static func isFieldValueByte(_ byte: UInt8) -> Bool {
        byte == 0x09 || byte == 0x20 || (0x21...0x7E).contains(byte) || byte >= 0x80
    }

    @Test("a token byte is exactly a tchar, for all 256 bytes")
    func tokenBytes() {
        for byte in UInt8.min...UInt8.max {
            #expect(HTTPSyntax.isTokenByte(byte) == Self.tokenCharacters.contains(byte), "byte \(byte)")
        }
    }

    @Test("one byte at any place of a name up to 24 bytes long decides whether it is a token, for all 256 bytes")
    func everyByteAtEveryPlaceOfAName() {
        // A name of letters, digits and `-` (what the word-at-a-time check passes whole), one byte replaced: in the
        // first word, a later one, the overlapping last word and a name too short for a word. `,` and `.` sit
        // either side of `-`, `/` and `:` either side of the digits, `@`, `[`, `` ` `` and `{` either side of the
        // letters.
        let pattern = Array("Ab-9zZ0-".utf8)
        for length in 1...24 {
            for place in 0..<length {
                for byte in UInt8.min...UInt8.max {
                    var name = (0..<length).map { pattern[$0 % pattern.count] }
                    name[place] = byte
                    let accepted = name.withUnsafeBytes { HTTPSyntax.isToken(bytes: $0) }
                    #expect(accepted == Self.tokenCharacters.contains(byte), "byte \(byte) at \(place) of \(length)")
                }
            }
        }
    }

    @Test("random names are judged as byte by byte")
    func randomNames() {
        var random = SplitMix64(seed: 0x7043_4E)
        let common = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-".utf8)
        var accepted = 0
        for _ in 0..<20_000 {
            let length = Int(random.next() % 40)
            let name = (0..<length).map { _ in
                random.next() % 16 == 0 ? UInt8(truncatingIfNeeded: random.next()) : common[Int(random.next() % 63)]
            }
            let expected = name.allSatisfy(Self.tokenCharacters.contains)
            if expected { accepted += 1 }
            #expect(name.withUnsafeBytes { HTTPSyntax.isToken(bytes: $0) } == expected, "\(name)")
        }
        #expect(accepted > 1_000 && accepted < 19_000)
        #expect(HTTPSyntax.isToken("X-Request-Id") && !HTTPSyntax.isToken("") && !HTTPSyntax.isToken("X Request"))
    }

    @Test("two names are the same ignoring case exactly when they are byte by byte, at any length and place")
    func sameIgnoringCase() {
        func reference(_ left: [UInt8], _ right: [UInt8]) -> Bool {
            left.count == right.count
                && zip(left, right).allSatisfy { HTTPSyntax.lowercasedASCII($0) == HTTPSyntax.lowercasedASCII($1) }
        }
        let base = Array("X-Forwarded-Host-Name-".utf8)
        for length in 0...20 {
            let name = Array(base.prefix(length))
            for place in 0..<max(length, 1) where length > 0 {
                // Every byte at one place of the other name: its case twin matches, every other byte does not.
                for byte in UInt8.min...UInt8.max {
                    var other = name.map { HTTPSyntax.lowercasedASCII($0) }
                    other[place] = byte
                    let same = name.withUnsafeBytes { left in
                        other.withUnsafeBytes { HTTPSyntax.sameIgnoringCase(bytes: left, $0) }
                    }
                    #expect(same == reference(name, other), "byte \(byte) at \(place) of \(length)")
                }
            }
            let longer = name + [UInt8(ascii: "x")]
            #expect(
                !name.withUnsafeBytes { left in longer.withUnsafeBytes { HTTPSyntax.sameIgnoringCase(bytes: left, $0) }
                }
            )
        }
        #expect(HTTPSyntax.sameIgnoringCase("Beagle-Platform", "BEAGLE-platform"))
        #expect(!HTTPSyntax.sameIgnoringCase("Beagle-Platform", "Beagle-Platforn"))
    }

    @Test("one byte at any place of a value up to 24 bytes long decides it alone, for all 256 bytes")
    func everyByteAtEveryPlace() {
        // The word-at-a-time check must see a byte in the first word, in a later one and in the tail; the bytes
        // around it (a space and `!`, just above the bytes refused) are where a borrow would show.
        for length in 1...24 {
            for place in 0..<length {
                for byte in UInt8.min...UInt8.max {
                    var value = (0..<length).map { $0.isMultiple(of: 2) ? UInt8(ascii: " ") : UInt8(ascii: "!") }
                    value[place] = byte
                    let accepted = value.withUnsafeBytes { HTTPSyntax.isFieldValue(bytes: $0) }
                    #expect(accepted == Self.isFieldValueByte(byte), "byte \(byte) at \(place) of \(length)")
                }
            }
        }
    }

    @Test("random values are judged as byte by byte")
    func randomValues() {
        var random = SplitMix64(seed: 0x5EED_F1E1D)
        // Mostly printable bytes, so that accepted values are common, with tabs, controls, DEL and obs-text.
        let alphabet: [UInt8] = Array(0x20...0x7E) + [0x09, 0x00, 0x0A, 0x0D, 0x1F, 0x7F, 0x80, 0xFF]
        var accepted = 0
        for _ in 0..<20_000 {
            let length = Int(random.next() % 40)
            let value = (0..<length).map { _ in
                random.next() % 8 == 0
                    ? alphabet[Int(random.next() % UInt64(alphabet.count))]
                    : UInt8(0x20 + random.next() % 0x5F)
            }
            let expected = value.allSatisfy(Self.isFieldValueByte)
            if expected { accepted += 1 }
            #expect(value.withUnsafeBytes { HTTPSyntax.isFieldValue(bytes: $0) } == expected, "\(value)")
        }
        // Both answers were exercised.
        #expect(accepted > 1_000 && accepted < 19_000)
    }

    @Test("a string is a field value by the same rule as its bytes")
    func stringValues() {
        #expect(HTTPSyntax.isFieldValue("max-age=60, stale-while-revalidate=30\tx"))
        #expect(HTTPSyntax.isFieldValue("caf\u{E9}"))
        #expect(!HTTPSyntax.isFieldValue("a value long enough for two words\r\nX-Injected: 1"))
        #expect(!HTTPSyntax.isFieldValue("delete\u{7F}"))
    }

    @Test("a hop-by-hop name is one of the list, in any letter case, and nothing else is")
    func hopByHopNames() {
        let listed = HTTPSyntax.hopByHopHeaders.map { $0.description }
        for name in listed {
            for spelling in [name, name.uppercased(), name.prefix(1).uppercased() + name.dropFirst()] {
                #expect(HTTPSyntax.isHopByHop(spelling), "\(spelling)")
                #expect(Array(spelling.utf8).withUnsafeBytes { HTTPSyntax.isHopByHop($0) }, "\(spelling)")
            }
            // One letter off, or one letter more or less, is another name.
            let changed = String(name.dropLast()) + (name.last == "e" ? "x" : "e")
            for other in [changed, name + "s", String(name.dropFirst()), "x-" + name] {
                #expect(!HTTPSyntax.isHopByHop(other), "\(other)")
            }
        }
        for name in ["content-length", "cache-control", "etag", "date", "server", "vary", "age", "x-cache", ""] {
            #expect(!HTTPSyntax.isHopByHop(name), "\(name)")
        }
    }

    @Test("lines end at CRLF; a bare line feed ends the reading; the last line needs no line ending")
    func lines() {
        func read(_ text: String) -> (lines: [String], valid: Bool, counted: Int) {
            let bytes = Array(text.utf8)
            return bytes.withUnsafeBytes { raw in
                var reader = LineReader(bytes: raw)
                let counted = reader.remainingLineCount
                var lines: [String] = []
                while let line = reader.next() { lines.append(String(decoding: raw[line], as: UTF8.self)) }
                return (lines, reader.isValid, counted)
            }
        }
        let head = read("Host: a\r\nAccept: */*\r\n\r\nlast")
        #expect(head.lines == ["Host: a", "Accept: */*", "", "last"])
        #expect(head.valid && head.counted == 4)
        let bare = read("Host: a\nAccept: */*\r\n")
        #expect(bare.lines.isEmpty && !bare.valid)
        let leading = read("\nHost: a")
        #expect(leading.lines.isEmpty && !leading.valid)
        let empty = read("")
        #expect(empty.lines == [""] && empty.valid && empty.counted == 0)
    }

    @Test("a head's end comes with its field lines counted, as many as a reader finds after the start line")
    func headEndCountsFieldLines() {
        for fieldCount in 0...12 {
            let fields = (0..<fieldCount).map { "X-Field-\($0): \(String(repeating: "v", count: $0 * 7))\r\n" }
            let head = "GET /screens/home HTTP/1.1\r\n" + fields.joined() + "\r\n"
            let buffer = ByteBuffer(string: head + "after")
            guard let found = HTTPMessageSyntax.headEnd(in: buffer, scanned: 0) else {
                Issue.record("no end found with \(fieldCount) fields")
                continue
            }
            #expect(found.end == head.utf8.count - 4)
            #expect(found.fieldLines == fieldCount)
            let read = Array(head.utf8.prefix(found.end)).withUnsafeBytes { raw in
                var reader = LineReader(bytes: raw)
                _ = reader.next()
                return reader.remainingLineCount
            }
            #expect(read == fieldCount)
            // A scan resumed after part of the head has not seen its first lines: it gives no count.
            let resumed = HTTPMessageSyntax.headEnd(in: buffer, scanned: 10)
            #expect(resumed?.end == found.end && resumed?.fieldLines == nil)
        }
        #expect(HTTPMessageSyntax.headEnd(in: ByteBuffer(string: "GET / HTTP/1.1\r\nHost: a\r\n"), scanned: 0) == nil)
    }

    @Test("a word is made small as each of its bytes would be, for all 256 bytes at each of its eight places")
    func lowercasedWord() {
        // The neighbours are the bytes either side of the capitals and of ASCII's end, where a carry would show.
        for neighbour: UInt8 in [0x00, 0x40, 0x41, 0x5A, 0x5B, 0x7F, 0x80, 0xC1, 0xFF] {
            for byte in UInt8.min...UInt8.max {
                for place in 0..<8 {
                    var bytes = [UInt8](repeating: neighbour, count: 8)
                    bytes[place] = byte
                    let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                    let expected = bytes.map(HTTPSyntax.lowercasedASCII).withUnsafeBytes {
                        $0.loadUnaligned(as: UInt64.self)
                    }
                    #expect(HTTPSyntax.lowercasedASCII(word: word) == expected, "byte \(byte) at \(place)")
                }
            }
        }
    }

    @Test("names of every length compare equal under any case, and differ at any single byte")
    func namesOfEveryLength() {
        let names: [StaticString] = [
            "te", "age", "host", "range", "server", "expires", "connection", "x-request-id", "if-none-match",
            "content-length",
            "accept-encoding", "proxy-connection", "transfer-encoding", "if-unmodified-since",
            "access-control-allow-origin",
        ]
        for name in names {
            let lower = Array(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            let upper = lower.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }
            let mixed = lower.enumerated().map { $0.offset % 3 == 0 ? upper[$0.offset] : $0.element }
            for spelling in [lower, upper, mixed] {
                #expect(spelling.withUnsafeBytes { HTTPSyntax.equalsIgnoringCase(bytes: $0, name) }, "\(name)")
                #expect(HTTPSyntax.equalsIgnoringCase(String(decoding: spelling, as: UTF8.self), name))
                #expect(spelling.withUnsafeBytes { HTTPSyntax.equalsIgnoringCase(bytes: $0[...], name) })
            }
            for place in lower.indices {
                // Bytes that differ from a name's byte by the 0x20 bit alone (CR and `-`, `@` and `` ` ``, `_` and
                // DEL), or lie past ASCII.
                for other: UInt8 in [0x5F, 0x0D, 0x40, 0x7F, 0xC1] where other != lower[place] {
                    var changed = mixed
                    changed[place] = other
                    #expect(!changed.withUnsafeBytes { HTTPSyntax.equalsIgnoringCase(bytes: $0, name) }, "\(name)")
                }
            }
            #expect(!(lower + [0x61]).withUnsafeBytes { HTTPSyntax.equalsIgnoringCase(bytes: $0, name) })
        }
    }
}
