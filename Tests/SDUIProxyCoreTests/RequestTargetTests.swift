import Testing

@testable import SDUIProxyCore

@Suite("Request targets: normalisation, and the path and query cut from it")
struct RequestTargetTests {
    @Test(
        "equivalent spellings normalise to one target",
        arguments: [
            ("/screens/home", "/screens/home", "/screens/home", nil),
            ("/screens/home?tab=1&x=2", "/screens/home?tab=1&x=2", "/screens/home", "tab=1&x=2"),
            ("/%73creens/%7euser?q=%2f%2F", "/screens/~user?q=%2F%2F", "/screens/~user", "q=%2F%2F"),
            ("/a/./b/../c", "/a/c", "/a/c", nil),
            ("/../../etc/passwd", "/etc/passwd", "/etc/passwd", nil),
            ("/a/b/..", "/a/", "/a/", nil),
            ("/a?", "/a", "/a", nil),
            ("/a?b#fragment", "/a?b", "/a", "b"),
            ("/a#fragment", "/a", "/a", nil),
            ("//a//b?x=?y", "//a//b?x=?y", "//a//b", "x=?y"),
            ("/a/.hidden?.x", "/a/.hidden?.x", "/a/.hidden", ".x"),
        ] as [(String, String, String, String?)]
    )
    func normalises(text: String, description: String, path: String, query: String?) throws {
        let target = try RequestTarget(parsing: text)
        #expect(target.description == description)
        #expect(target.path == path)
        #expect(target.query == query)
    }

    @Test("a target that needed normalising equals, and hashes like, the one spelled normally")
    func normalisedEqualsNormal() throws {
        for (spelled, normal) in [("/%61?b=%7e", "/a?b=~"), ("/x/../a?b", "/a?b"), ("/a?", "/a"), ("/%2f?q", "/%2F?q")]
        {
            let a = try RequestTarget(parsing: spelled)
            let b = try RequestTarget(parsing: normal)
            #expect(a == b)
            #expect(a.hashValue == b.hashValue)
            #expect(a.path == b.path && a.query == b.query)
        }
        #expect(try RequestTarget(parsing: "/a?b") != RequestTarget(parsing: "/a%3Fb"))
    }

    @Test(
        "targets that are not a path in origin form, or hold bytes a URI cannot, are refused",
        arguments: ["", "screens", "http://x/a", "/a b", "/a%zz", "/a%4", "/\u{7F}", "/é"]
    )
    func refuses(text: String) {
        #expect(throws: RequestTarget.InvalidTarget.self) { try RequestTarget(parsing: text) }
    }
}

@Suite("A target found already normal eight bytes at a time, as byte by byte")
struct RequestTargetFastPathTests {
    private static func isPlain(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && !"%#.?".utf8.contains(byte)
    }

    /// The check a byte at a time, as it was written before words: the reference.
    private static func referenceQuestionMark(_ text: String) -> Int?? {
        let bytes = Array(text.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return nil }
        var previous: UInt8 = 0
        var questionMark: Int?
        for (offset, byte) in bytes.enumerated() {
            switch byte {
            case UInt8(ascii: "%"), UInt8(ascii: "#"): return nil
            case UInt8(ascii: ".") where questionMark == nil && previous == UInt8(ascii: "/"): return nil
            case UInt8(ascii: "?") where questionMark == nil: questionMark = offset
            case _ where byte <= 0x20 || byte >= 0x7F: return nil
            default: break
            }
            previous = byte
        }
        if let questionMark, questionMark == bytes.count - 1 { return nil }
        return .some(questionMark)
    }

    @Test("every byte at every place of a word is judged plain or not, and the first that is not is found")
    func wordClassification() {
        let plain = UInt8(ascii: "a")
        for place in 0..<8 {
            for byte in 0...UInt8.max {
                var bytes = [UInt8](repeating: plain, count: 8)
                bytes[place] = byte
                let word = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
                let flags = RequestTarget.notPlainTargetBytes(word)
                #expect((flags == 0) == Self.isPlain(byte), "byte \(byte) at \(place)")
                if flags != 0 { #expect(flags.trailingZeroBitCount >> 3 == place, "byte \(byte) at \(place)") }
            }
        }
    }

    @Test("random targets are found normal, or not, with the query where the byte-by-byte check finds them")
    func randomTargets() {
        var generator = SystemRandomNumberGenerator()
        // Mostly plain bytes, with each kind of byte the cases tell apart among them.
        let alphabet = Array("abcXYZ019-_~/".utf8) + Array("%#.?/ \u{7F}".utf8) + [0x80, 0xC3, 0x09, 0x00]
        for round in 0..<20_000 {
            let length = Int.random(in: 1...40, using: &generator)
            var bytes: [UInt8] = [UInt8(ascii: "/")]
            for _ in 1..<length {
                let plainMostly = Int.random(in: 0..<4, using: &generator) > 0
                bytes.append(
                    plainMostly
                        ? alphabet[Int.random(in: 0..<13, using: &generator)]
                        : alphabet.randomElement(using: &generator)!
                )
            }
            let text = String(decoding: bytes, as: UTF8.self)
            let expected = Self.referenceQuestionMark(text)
            let found = RequestTarget.alreadyNormal(text)
            switch expected {
            case .none:
                #expect(found == nil, "round \(round): \(Array(text.utf8))")
            case .some(let questionMark):
                let path = questionMark.map { String(decoding: bytes[..<$0], as: UTF8.self) } ?? text
                let query = questionMark.map { String(decoding: bytes[($0 + 1)...], as: UTF8.self) }
                #expect(found?.path == path, "round \(round): \(bytes)")
                #expect(found?.query == query, "round \(round): \(bytes)")
                #expect(found?.description == text)
            }
        }
    }
}
