import NIOCore
import Testing

@testable import SDUIProxyCore

@Suite("JSON parser: kept keys, depth and errors at the edges of its fast paths")
struct JSONParserEdgeTests {
    let decoder = ComponentDecoder()
    let planner: PrefetchPlanner

    init() throws {
        planner = PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])
    }

    /// The error a one-pass validation reports for `bytes`, or nil when it accepts them.
    func planningFailure(_ bytes: [UInt8]) -> String? {
        do {
            _ = try decoder.validateComponent(ByteBuffer(bytes: bytes), planningWith: planner)
            return nil
        } catch {
            return error.reason
        }
    }

    /// `read` given the scan of `document`, whose root is the one object reported, and the document's bytes.
    func scanningRoot<Result>(
        _ document: String,
        keeping keys: JSONParser.KeySet,
        reporting marker: String,
        _ read: (JSONParser.Scan, UnsafeRawBufferPointer) throws -> Result
    ) throws -> Result {
        try ByteBuffer(string: document).withUnsafeReadableBytes { bytes in
            let scan = try JSONParser.scanObjects(
                bytes,
                keeping: keys,
                reporting: marker,
                maximumDepth: 0,
                maximumCount: 1
            )
            return try read(scan, bytes)
        }
    }

    @Test("kept keys are told apart by length and by every byte, short or long, anywhere in the document")
    func keptKeysAreMatchedExactly() throws {
        let long = String(repeating: "n", count: 63)
        let kept = [
            "k", "abcdefgh", "abcdefghi", "abcdefghj", "abcdefgX", "shouldPrefetch", "shouldPrefetcH", "é", long,
            long + "n",
        ]
        let others = [
            "", "K", "kk", "abcdefg", "abcdefghij", "bbcdefgh", "abcdefgY", "shouldPrefetcx", "shouldprefetch", "e",
            "n" + long, String(long.dropLast()),
        ]
        // Escaped spellings of a kept and of an other name: compared unescaped, like any key.
        let escaped = [
            #"abcd\u0065fgh"#: "abcdefgh", #"abcd\u0065fgX"#: "abcdefgX", #"shouldPrefetc\u0068"#: "shouldPrefetch",
        ]
        let keySet = JSONParser.KeySet(kept)
        var random = SplitMix64(seed: 0x4B45_5953)
        for round in 0..<1500 {
            // Distinct names (as unescaped), in random order; the marker `k` somewhere among them.
            var pool = kept.dropFirst().map { ($0, $0) } + others.map { ($0, $0) } + escaped.map { ($0.key, $0.value) }
            var members: [(spelled: String, name: String)] = [("k", "k")]
            var used: Set<String> = ["k"]
            for _ in 0..<Int(random.next() % 6) {
                let (spelled, name) = pool.remove(at: Int(random.next() % UInt64(pool.count)))
                guard used.insert(name).inserted else { continue }
                members.insert((spelled, name), at: Int(random.next() % UInt64(members.count + 1)))
            }
            var expected: [String: String] = [:]
            var parts: [String] = []
            for (index, member) in members.enumerated() {
                // Short numbers at the end put the last keys within eight bytes of the document's end.
                if round % 3 == 0, index == members.count - 1, member.name != "k" {
                    parts.append(#""\#(member.spelled)":\#(index)"#)
                } else {
                    let value = "v\(round)-\(index)"
                    parts.append(#""\#(member.spelled)":"\#(value)""#)
                    if kept.contains(member.name) { expected[member.name] = value }
                }
            }
            let document = "{" + parts.joined(separator: ",") + "}"
            let found = try scanningRoot(document, keeping: keySet, reporting: "k") { scan, bytes in
                var found: [String: String] = [:]
                guard let root = scan.objects.first else { return found }
                for (index, name) in kept.enumerated() {
                    switch scan.value(of: index, in: root.members) {
                    case .string(let span)?: found[name] = JSONParser.text(of: span, in: bytes)
                    case .number?: break
                    case nil: break
                    case let other?: Issue.record("\(name) kept as \(other) in \(document)")
                    }
                }
                return found
            }
            #expect(found == expected, "\(document)")
        }
    }

    @Test("values nested as deep as the limit are read, one level deeper is an error, whatever their kind")
    func depthLimitForEveryKind() {
        let limit = JSONParser.maximumDepth
        for value in [#""x""#, "{}", "[]", "1", "true"] {
            let open = String(repeating: "[", count: limit - 1)
            let close = String(repeating: "]", count: limit - 1)
            // Under an object member at the root: the value sits at depth `limit - 1`, then `limit`.
            let inReach = #"{"_beagleComponent_":"a","x":"# + open.dropLast() + value + close.dropLast() + "}"
            #expect(planningFailure(Array(inReach.utf8)) == nil, "\(value)")
            let tooDeep = #"{"_beagleComponent_":"a","x":"# + open + value + close + "}"
            let offset = #"{"_beagleComponent_":"a","x":"#.utf8.count + limit - 1
            #expect(
                planningFailure(Array(tooDeep.utf8))
                    == "the backend's response is not valid JSON (nested deeper than \(limit) levels at byte \(offset))",
                "\(value)"
            )
            #expect(throws: ComponentDecoder.Failure.self) {
                try decoder.validateComponent(ByteBuffer(string: tooDeep))
            }
        }
    }

    @Test("each kind of bad document keeps its message and the byte it names")
    func errorMessagesAndOffsets() {
        let prefix = "the backend's response is not valid JSON ("
        let cases: [([UInt8], String)] = [
            (Array(#"{"a":1,}"#.utf8), "expected a string at byte 8"),
            (Array(#"{1:2}"#.utf8), "expected a string at byte 2"),
            (Array(#"{"a" 1}"#.utf8), "expected : at byte 6"),
            (Array(#"{"a":"x"#.utf8), "the document ends inside a string at byte 7"),
            (Array(#"{"a":"abcdefghijklmnop"#.utf8), "the document ends inside a string at byte 22"),
            (Array(#"{"a":"x\"#.utf8), "the document ends inside a string at byte 8"),
            (Array(#"{"a":"\u12G4"}"#.utf8), "a bad \\u escape at byte 11"),
            (Array(#"{"a":"\q"}"#.utf8), "a bad escape in a string at byte 8"),
            (Array(#"{"a":"x"#.utf8) + [0x01] + Array(#""}"#.utf8), "a control character in a string at byte 8"),
            (
                Array(#"{"a":"abcdefghijk"#.utf8) + [0x1F] + Array(#""}"#.utf8),
                "a control character in a string at byte 18"
            ),
            (Array(#"{"a":""#.utf8) + [0xFF] + Array(#""}"#.utf8), "a string is not valid UTF-8 at byte 8"),
            (Array(#"{"abcdefghi"#.utf8) + [0xC3] + Array(#"":1}"#.utf8), "a string is not valid UTF-8 at byte 13"),
            ([], "a value is missing at byte 0"),
            (Array(#"{"a":1"#.utf8), "the document ends inside an object at byte 6"),
            (Array(#"{"a":1]"#.utf8), "expected , or } in an object at byte 7"),
            (Array(#"{"a":[1}"#.utf8), "expected , or ] in an array at byte 8"),
            (Array(#"{"a":tru}"#.utf8), "a bad literal at byte 9"),
            (Array(#"{"a":-}"#.utf8), "a bad number at byte 6"),
            (Array(#"{"a":1} x"#.utf8), "text after the document at byte 8"),
            // The same kinds with white space where the fast paths leave it to be stepped over later.
            (Array(#"{"a":1, }"#.utf8), "expected a string at byte 9"),
            (Array(#"{"a":1,  "#.utf8), "expected a string at byte 9"),
            (Array(#"{"a":1 x}"#.utf8), "expected , or } in an object at byte 8"),
            (Array("{\"a\":1\n\t".utf8), "the document ends inside an object at byte 8"),
            (Array(#"{"a":[1, ]}"#.utf8), "unexpected character at byte 9"),
            (Array(#"{"a":[1 ,"#.utf8), "a value is missing at byte 9"),
            (Array(#"{"a":[1 x]}"#.utf8), "expected , or ] in an array at byte 9"),
            (Array("{\"a\":[1,\u{0B}2]}".utf8), "unexpected character at byte 8"),
        ]
        for (bytes, reason) in cases {
            #expect(planningFailure(bytes) == prefix + reason + ")", "\(String(decoding: bytes, as: UTF8.self))")
            #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(bytes: bytes)) }
        }
    }

    @Test("white space between any two tokens changes nothing a scan finds")
    func whiteSpaceAnywhere() throws {
        let keys = JSONParser.KeySet(["url", "marker", "inner"])
        let tokens = [
            "{", #""marker""#, ":", #""m""#, ",", #""url""#, ":", #""/a""#, ",", #""list""#, ":", "[", "1", ",", "{",
            #""marker""#, ":", #""n""#, "}", ",", "[", "]", ",", "true", "]", ",", #""inner""#, ":", "{", #""url""#,
            ":",
            #""/b""#, "}", ",", #""empty""#, ":", "{", "}", "}",
        ]
        /// Each reported object's depth and kept members, strings read as text: what a scan finds, wherever the
        /// white space put it.
        func found(_ document: String) throws -> [String] {
            try ByteBuffer(string: document).withUnsafeReadableBytes { bytes in
                let scan = try JSONParser.scanObjects(
                    bytes,
                    keeping: keys,
                    reporting: "marker",
                    maximumDepth: 8,
                    maximumCount: 8
                )
                func describe(_ members: Range<Int>) -> String {
                    scan.members[members].map { member in
                        switch member.value {
                        case .string(let span): "\(member.key)=\(JSONParser.text(of: span, in: bytes))"
                        case .object(let inner): "\(member.key)={\(describe(inner))}"
                        default: "\(member.key)=?"
                        }
                    }
                    .joined(separator: ",")
                }
                return scan.objects.map { "\($0.depth): \(describe($0.members))" }
            }
        }
        let compact = try found(tokens.joined())
        #expect(compact == ["0: 1=m,0=/a,2={0=/b}", "2: 1=n"])
        // Each gap between tokens (and before and after them) holds each kind of white space, then all do.
        for gap in 0...tokens.count {
            for space in [" ", "\t", "\n", "\r", " \r\n\t "] {
                let document = (tokens[..<gap] + [space] + tokens[gap...]).joined()
                #expect(try found(document) == compact, "\(document.debugDescription)")
            }
        }
        #expect(try found(" " + tokens.joined(separator: " \n\t") + "\r\n") == compact)
    }

    @Test("escapes, quotes and UTF-8 that straddle an eight-byte block are read as one string")
    func stringsAcrossBlocks() throws {
        for lead in 0..<17 {
            let text = String(repeating: "a", count: lead)
            for (spelled, value) in [(#"\"x"#, "\"x"), (#"\\"#, "\\"), (#"\u00e9z"#, "éz"), ("éz", "éz"), ("😀", "😀")] {
                let document = #"{"_beagleComponent_":"\#(text)\#(spelled)\#(text)","s":1}"#
                #expect(planningFailure(Array(document.utf8)) == nil, "\(document)")
                let scan = try ByteBuffer(string: document).withUnsafeReadableBytes { bytes in
                    let scan = try JSONParser.scanObjects(
                        bytes,
                        keeping: JSONParser.KeySet(["_beagleComponent_"]),
                        reporting: "_beagleComponent_",
                        maximumDepth: 0,
                        maximumCount: 1
                    )
                    guard let root = scan.objects.first, case .string(let span)? = scan.value(of: 0, in: root.members)
                    else { return "" }
                    return JSONParser.text(of: span, in: bytes)
                }
                #expect(scan == text + value + text)
                // The same string cut before its last byte or with a lone lead byte is refused.
                let cut = Array(#"{"_beagleComponent_":"\#(text)\#(spelled)"#.utf8).dropLast()
                #expect(planningFailure(Array(cut)) != nil)
                let broken = Array(#"{"_beagleComponent_":"\#(text)"#.utf8) + [0xE2, 0x82] + Array(#"\#(text)"}"#.utf8)
                #expect(planningFailure(broken) != nil)
            }
        }
    }

    @Test("every byte, at every place of a sixteen-byte block and near the document's end, is judged on its own")
    func everyByteInEveryPlace() throws {
        // A string's bytes are tested sixteen at a time, then eight, then one: a byte is plain (it neither ends,
        // escapes nor breaks the string) whichever test reads it. Read with and without planning, the two passes.
        let rootStart = Array(#"{"_beagleComponent_":""#.utf8)
        for lead in 0..<33 {
            for tail in [0, 5, 24] {
                for value in 0...255 {
                    let byte = UInt8(value)
                    let content =
                        Array(repeating: UInt8(ascii: "a"), count: lead) + [byte]
                        + Array(repeating: UInt8(ascii: "z"), count: tail)
                    let document = rootStart + content + Array(#""}"#.utf8)
                    let plain = byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
                    let planned = planningFailure(document)
                    let validated: String?
                    do {
                        try decoder.validateComponent(ByteBuffer(bytes: document))
                        validated = nil
                    } catch {
                        validated = error.reason
                    }
                    #expect(
                        (planned == nil) == plain,
                        "byte \(value) after \(lead), \(tail) after it: \(planned ?? "")"
                    )
                    #expect(validated == planned, "byte \(value) after \(lead), \(tail) after it")
                    switch byte {
                    case 0..<0x20: #expect(planned?.contains("a control character in a string") == true)
                    case 0x80...: #expect(planned?.contains("a string is not valid UTF-8") == true)
                    case UInt8(ascii: "\\") where tail > 0:
                        #expect(planned?.contains("a bad escape in a string") == true)
                    case UInt8(ascii: "\\"):
                        // It escapes the closing quote.
                        #expect(planned?.contains("the document ends inside a string") == true)
                    default: break
                    }
                    guard plain else { continue }
                    let text = try scanningRoot(
                        String(decoding: document, as: UTF8.self),
                        keeping: JSONParser.KeySet(["_beagleComponent_"]),
                        reporting: "_beagleComponent_"
                    ) { scan, bytes -> String? in
                        guard let root = scan.objects.first,
                            case .string(let span)? = scan.value(of: 0, in: root.members)
                        else { return nil }
                        return JSONParser.text(of: span, in: bytes)
                    }
                    #expect(text == String(decoding: content, as: UTF8.self), "byte \(value) after \(lead)")
                }
            }
        }
    }

    @Test(
        "every kept name is found, whatever its length and bytes, and no other key of the same length is taken for it"
    )
    func keptNamesAmongDecoys() throws {
        // Names of 0 to 20 bytes; for each, decoys of its length that differ in the first, the last, or a middle byte.
        let names =
            [""]
            + (1...20).map { length in
                String((0..<length).map { Character(Unicode.Scalar(97 + ($0 * 7 + length) % 26)!) })
            }
        let keys = JSONParser.KeySet(names + ["marker"])
        func decoys(of name: String) -> [String] {
            guard !name.isEmpty else { return [] }
            var bytes = Array(name.utf8)
            var result: [String] = []
            for place in Set([0, bytes.count / 2, bytes.count - 1]) {
                let kept = bytes[place]
                bytes[place] = kept == UInt8(ascii: "z") ? UInt8(ascii: "y") : kept + 1
                result.append(String(decoding: bytes, as: UTF8.self))
                bytes[place] = kept
            }
            return result
        }
        for (number, name) in names.enumerated() {
            let members = decoys(of: name).map { #""\#($0)":0"# } + [#""\#(name)":\#(number)"#, #""marker":"m""#]
            let document = "{" + members.joined(separator: ",") + "}"
            let kept = try scanningRoot(document, keeping: keys, reporting: "marker") { scan, _ in
                scan.objects.first.map { root in scan.members[root.members].map(\.key) } ?? []
            }
            // The name itself and the marker, nothing for the decoys.
            #expect(kept == [number, names.count], "\(name)")
        }
    }
}
