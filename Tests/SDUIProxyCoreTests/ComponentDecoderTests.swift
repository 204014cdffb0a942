import Foundation
import NIOCore
import Testing

@testable import SDUIProxyCore

@Suite("Component decoding and the JSON parser")
struct ComponentDecoderTests {
    let decoder = ComponentDecoder()
    let planner: PrefetchPlanner

    init() throws {
        planner = PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])
    }

    /// Whether the one-pass validation with planning accepts `body`; it must agree with ``validateComponent``.
    func validatesWhilePlanning(_ body: ByteBuffer) -> Bool {
        (try? decoder.validateComponent(body, planningWith: planner)) != nil
    }

    /// What a scan keeps for `keys` at the root of `text` (strings read out), when the root is an object with a
    /// string `keys[0]`.
    func rootStrings(_ text: String, keys: [String]) throws -> [String: KeptValueText] {
        let keySet = JSONParser.KeySet(keys)
        return try ByteBuffer(string: text).withUnsafeReadableBytes { bytes in
            let scan = try JSONParser.scanObjects(
                bytes,
                keeping: keySet,
                reporting: keys[0],
                maximumDepth: 0,
                maximumCount: 1
            )
            guard let root = scan.objects.first else { return [:] }
            var found: [String: KeptValueText] = [:]
            for (index, key) in keys.enumerated() {
                switch scan.value(of: index, in: root.members) {
                case .string(let span)?: found[key] = .string(JSONParser.text(of: span, in: bytes))
                case .bool(let flag)?: found[key] = .bool(flag)
                case .null?: found[key] = .null
                case .number?: found[key] = .number
                case .object?, .array?: found[key] = .container
                case nil: break
                }
            }
            return found
        }
    }

    enum KeptValueText: Equatable {
        case string(String)
        case bool(Bool)
        case null
        case number
        case container
    }

    @Test(
        "the reference parser reads every Beagle fixture as Foundation's decoder does, and the scan accepts them",
        arguments: Fixtures.beagleNames
    )
    func fixturesParse(name: String) throws {
        let data = try Fixtures.data(name)
        let reference = try ReferenceJSONParser.parse(Array(data))
        let foundations = try JSONDecoder().decode(JSONValue.self, from: data)
        #expect(reference == foundations)
        #expect(throws: Never.self) {
            try ByteBuffer(bytes: data).withUnsafeReadableBytes { bytes in _ = try PrefetchPlanner.scan(bytes) }
        }
    }

    @Test(
        "components are told from actions and other JSON, the same way with and without a tree",
        arguments: Fixtures.beagleNames
    )
    func componentsAndActions(name: String) throws {
        let body = ByteBuffer(bytes: try Fixtures.data(name))
        let tree = try ReferenceJSONParser.component(Array(try Fixtures.data(name)))
        let validated = (try? decoder.validateComponent(body)) != nil
        #expect((tree != nil) == validated)
        #expect(validatesWhilePlanning(body) == validated)
        if validated {
            #expect(try decoder.validateComponent(body, planningWith: planner) == planner.plan(forComponent: body))
        }
        let root = try JSONDecoder().decode(JSONValue.self, from: try Fixtures.data(name))
        let isComponent = root["_beagleComponent_"]?.stringValue.map { !$0.isEmpty } ?? false
        #expect(validated == isComponent, "\(name)")
    }

    @Test("the sample screens are components")
    func samples() throws {
        for name in ["home", "products", "products/1"] {
            try decoder.validateComponent(ByteBuffer(bytes: try Fixtures.sampleScreenData("\(name).json")))
        }
    }

    @Test(
        "invalid JSON is refused",
        arguments: [
            "", "{", "{\"a\":1,}", "[1,2,]", "{\"a\" 1}", "01", "1.", "-", "1e", "+1", "tru", "nul", "\"abc",
            "\"tab\there\"", "\"bad \\x escape\"", "\"\\u12G4\"", "{\"a\":1} trailing", "{'a':1}", "[1 2]",
            String(repeating: "[", count: 600) + String(repeating: "]", count: 600),
        ]
    )
    func invalid(text: String) {
        #expect(throws: ReferenceJSONParser.Failure.self) { try ReferenceJSONParser.parse(Array(text.utf8)) }
        #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(string: text)) }
        #expect(!validatesWhilePlanning(ByteBuffer(string: text)))
    }

    @Test("invalid UTF-8 in a string is refused")
    func invalidUTF8() {
        let bytes: [UInt8] = Array(#"{"_beagleComponent_":"a","t":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: ReferenceJSONParser.Failure.self) { try ReferenceJSONParser.parse(bytes) }
        #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(bytes: bytes)) }
        #expect(!validatesWhilePlanning(ByteBuffer(bytes: bytes)))
    }

    @Test("escapes, literals and nesting are read as the right values")
    func values() throws {
        let text =
            #"{"s":"a\"b\\c\/d\n\u00e9\ud83d\ude00","n":[-1.5e2,0,12],"t":true,"f":false,"z":null,"o":{"p":[{}]},"e":-0.5E+3}"#
        let kept = try rootStrings(text, keys: ["s", "n", "t", "f", "z", "o", "e"])
        #expect(kept["s"] == .string("a\"b\\c/d\né😀"))
        #expect(kept["n"] == .container)
        #expect(kept["t"] == .bool(true))
        #expect(kept["f"] == .bool(false))
        #expect(kept["z"] == .null)
        #expect(kept["o"] == .container)
        #expect(kept["e"] == .number)
        let reference = try ReferenceJSONParser.parse(Array(text.utf8))
        #expect(reference["s"] == .string("a\"b\\c/d\né😀"))
        #expect(reference["n"] == .array([.number(-150), .number(0), .number(12)]))
        #expect(reference["o"]?["p"] == .array([.object([:])]))
    }

    @Test("a component needs a non-empty string type at its root")
    func componentRule() throws {
        for text in [
            #"{"_beagleComponent_":""}"#, #"{"_beagleComponent_":3}"#, #"{"child":{"_beagleComponent_":"a"}}"#, "[]",
        ] {
            #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(string: text)) }
            #expect(try ReferenceJSONParser.component(Array(text.utf8)) == nil)
            #expect(!validatesWhilePlanning(ByteBuffer(string: text)))
        }
        let component = ByteBuffer(string: #" {"x":[1,{"y":"z"}], "_beagleComponent_" : "beagle:text" } "#)
        #expect(throws: Never.self) { try decoder.validateComponent(component) }
        #expect(validatesWhilePlanning(component))
        #expect(validatesWhilePlanning(ByteBuffer(string: #"{"\u005fbeagleComponent_":"a"}"#)))
        #expect(!validatesWhilePlanning(ByteBuffer(string: #"{"_beagleComponent_":"a","x":{"#)))
    }

    @Test("the root's type key is matched byte for byte: a key of its length, a prefix or a longer one is not it")
    func rootKeyNearMisses() {
        for key in [
            "_beagleComponent-", "xbeagleComponent_", "_BeagleComponent_", "_beagleComponent", "_beagleComponent__",
        ] {
            let text = "{\"\(key)\":\"beagle:text\"}"
            #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(string: text)) }
            #expect(!validatesWhilePlanning(ByteBuffer(string: text)), "\(key)")
        }
        #expect(validatesWhilePlanning(ByteBuffer(string: #"{"_beagleComponentX":1,"_beagleComponent_":"a"}"#)))
    }

    @Test("mutated components: the one-pass scan accepts what the tree parser accepts and plans what the tree holds")
    func scanAgreesWithTheTree() async throws {
        let names = Fixtures.beagleNames
        // With every route asking for prefetch, the plans have targets and skipped URLs to compare.
        // Each fixture as a child of a component (most are actions or parts of one), with every route asking for
        // prefetch, and a screen of actions with URLs of each kind the planner tells apart.
        let fixtures = try names.map { name in
            let text = String(decoding: try Fixtures.data(name), as: UTF8.self)
                .replacingOccurrences(of: #""shouldPrefetch": false"#, with: #""shouldPrefetch": true"#)
            return #"{"_beagleComponent_":"beagle:container","children":["# + text + "]}"
        }
        let routes = [
            #"{"url":"/screens/a?x=1","shouldPrefetch":true}"#,
            #"{"url":"http://localhost:8080/screens/b","shouldPrefetch":true,"httpAdditionalData":{"method":"get"}}"#,
            #"{"url":"https://elsewhere.example/c","shouldPrefetch":true}"#,
            #"{"url":"/screens/@{id}","shouldPrefetch":true}"#,
            #"{"url":"/screens/d","shouldPrefetch":true,"httpAdditionalData":{"method":"POST","body":{"a":1}}}"#,
            #"{"url":"/scr\u0065ens/e","shouldPrefetch":true}"#,
        ]
        let actions = routes.enumerated().map { index, route in
            let name = ["beagle:pushView", "beagle:PUSHSTACK", "beagle:resetStack", "beagle:resetApplication"][
                index % 4
            ]
            return #"{"_beagleAction_":"\#(name)","route":\#(route)}"#
        }
        let screen =
            #"{"_beagleComponent_":"beagle:screenComponent","child":{"onPress":["#
            + actions.joined(separator: ",") + "]}}"
        let documents = (fixtures + [screen, screen, screen]).map { Array($0.utf8) }
        let alphabet = Array(#"{}[]":,\ 0123456789.-+eEtrufalsn_/u"#.utf8) + [0x80, 0xC3, 0x0A]
        var random = SplitMix64(seed: 0x5CA7)
        var accepted = 0
        var planned = 0
        for round in 0..<4000 {
            if round % 100 == 0 { await CPUBoundTest.yieldToOtherTests() }
            var bytes = documents[round % documents.count]
            if round >= documents.count { random.mutate(&bytes, from: alphabet) }
            let body = ByteBuffer(bytes: bytes)
            let tree = (try? ReferenceJSONParser.component(bytes)) ?? nil
            let plan = try? decoder.validateComponent(body, planningWith: planner)
            #expect((tree != nil) == (plan != nil), "\(String(decoding: bytes, as: UTF8.self))")
            guard let tree, let plan else { continue }
            accepted += 1
            var expected = ReferencePlan()
            expected.walk(tree, depth: 0, planner: planner)
            #expect(Set(plan.targets) == expected.targets, "\(String(decoding: bytes, as: UTF8.self))")
            #expect(Set(plan.skipped) == expected.skipped, "\(String(decoding: bytes, as: UTF8.self))")
            #expect(plan.targets.count == expected.targets.count && !plan.truncated)
            if !plan.targets.isEmpty || !plan.skipped.isEmpty { planned += 1 }
        }
        // The mutations must leave enough documents whole for the comparison to mean something.
        #expect(accepted > 1000)
        #expect(planned > 150)
    }

    @Test("eight string bytes at a time: the first byte that is not plain is found exactly, wherever it is")
    func eightPlainStringBytes() {
        func isPlain(_ byte: UInt8) -> Bool {
            byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
        }
        func firstSpecial(_ bytes: [UInt8]) -> Int {
            let word = UInt64(littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
            let special = JSONParser.specialStringBytes(word)
            return special == 0 ? 8 : special.trailingZeroBitCount >> 3
        }
        func expected(_ bytes: [UInt8]) -> Int { bytes.firstIndex { !isPlain($0) } ?? 8 }
        // Every byte value at every position, behind plain bytes and behind each kind of byte that is not (whose
        // borrows could flag the bytes above it).
        for neighbour in [UInt8(ascii: "a"), 0x20, 0x7F, 0x21, 0x23, 0x5B, 0x5D, 0x00, 0x22, 0x5C, 0x1F, 0x80, 0x01] {
            for position in 0..<8 {
                for value in 0...255 {
                    var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 8)
                    bytes[position] = UInt8(value)
                    if position > 0 { bytes[position - 1] = neighbour }
                    #expect(firstSpecial(bytes) == expected(bytes), "\(bytes)")
                }
            }
        }
        var random = SplitMix64(seed: 0x8B17)
        for _ in 0..<20_000 {
            let bytes = (0..<8).map { _ in
                UInt8(truncatingIfNeeded: random.next() % 3 == 0 ? random.next() : random.next() % 96 + 32)
            }
            #expect(firstSpecial(bytes) == expected(bytes), "\(bytes)")
        }
    }

    @Test("strings end and escape where they should, at every offset from the end of the document")
    func stringBoundaries() throws {
        for length in 0..<20 {
            for tail in ["", " ", "  ", "       ", "        "] {
                let text = String(repeating: "x", count: length)
                let body = #"{"_beagleComponent_":"a","s":"\#(text)\"q\#(text)é"}"# + tail
                let kept = try rootStrings(body, keys: ["s"])
                #expect(kept["s"] == .string(text + "\"q" + text + "é"))
                #expect(validatesWhilePlanning(ByteBuffer(string: body)))
                let unterminated = #"{"_beagleComponent_":"a","s":"\#(text)"#
                #expect(!validatesWhilePlanning(ByteBuffer(string: unterminated)))
                let control = #"{"_beagleComponent_":"a","s":"\#(text)"# + "\u{1}" + #"\#(text)"}"# + tail
                #expect(!validatesWhilePlanning(ByteBuffer(string: control)))
            }
        }
    }

    @Test("a scan lets go of what objects that are not reported kept: it holds what it reports, not the document")
    func scanMemoryIsBounded() throws {
        // Routes kept under objects that are no actions, a thousand reported actions and then more beyond the
        // report limit, each followed by another unreported route.
        let unreported = #"{"route":{"url":"/x","shouldPrefetch":true,"httpAdditionalData":{"method":"GET"}}}"#
        let action = #"{"_beagleAction_":"beagle:pushView","route":{"url":"/a","shouldPrefetch":true}}"#
        let parts = (0..<3000).map { $0 % 2 == 0 ? unreported : action }
        let document = #"{"_beagleComponent_":"beagle:container","children":["# + parts.joined(separator: ",") + "]}"
        let scan = try ByteBuffer(string: document).withUnsafeReadableBytes { bytes in
            try PrefetchPlanner.scan(bytes, rootMember: ComponentDecoder.componentTypeKey)
        }
        #expect(scan.rootHasMember)
        #expect(scan.objects.count == PrefetchPlanner.maximumActions)
        #expect(scan.truncated)
        // Each reported action keeps its two members and its route's two: nothing of the unreported routes.
        #expect(scan.members.count == PrefetchPlanner.maximumActions * 4)
        for object in scan.objects {
            // Key 1 is `route`, the planner's second kept key.
            guard case .object(let route)? = scan.value(of: 1, in: object.members) else {
                Issue.record("an action lost its route")
                break
            }
            #expect(route.count == 2)
        }
    }

    @Test("content types that count as JSON")
    func jsonContentTypes() {
        #expect(ComponentDecoder.isJSON(contentType: "application/json"))
        #expect(ComponentDecoder.isJSON(contentType: "application/json; charset=utf-8"))
        #expect(ComponentDecoder.isJSON(contentType: "application/vnd.beagle+json"))
        #expect(!ComponentDecoder.isJSON(contentType: "text/json"))
        #expect(!ComponentDecoder.isJSON(contentType: "image/png"))
        #expect(!ComponentDecoder.isJSON(contentType: nil))
        #expect(ComponentDecoder.isJSON(contentType: " Application/JSON ;charset=utf-8"))
        #expect(ComponentDecoder.isJSON(contentType: "APPLICATION/VND.BEAGLE+JSON"))
        #expect(!ComponentDecoder.isJSON(contentType: "application/"))
        #expect(!ComponentDecoder.isJSON(contentType: "application/+jsonx"))
        #expect(!ComponentDecoder.isJSON(contentType: "application/jsonp"))
        #expect(!ComponentDecoder.isJSON(contentType: ""))
        #expect(!ComponentDecoder.isJSON(contentType: "json"))
    }
}

/// The prefetch rules written out a second time, over a decoded tree: every object up to
/// ``PrefetchPlanner/maximumDepth`` whose `_beagleAction_` is a navigation action, whose `route` asks for
/// prefetching and has a string `url`, yields that URL resolved (or skipped when its route is not a plain GET).
private struct ReferencePlan {
    var targets: Set<String> = []
    var skipped: Set<PrefetchPlanner.Skipped> = []

    mutating func walk(_ value: JSONValue, depth: Int, planner: PrefetchPlanner) {
        switch value {
        case .object(let members):
            if depth <= PrefetchPlanner.maximumDepth, let url = Self.prefetchableURL(members) {
                let outcome = Self.isPlainGET(members["route"]) ? planner.resolve(url) : .failure(.notPlainGET)
                switch outcome {
                case .success(let target): targets.insert(target)
                case .failure(let reason): skipped.insert(.init(url: url, reason: reason))
                }
            }
            for member in members.values { walk(member, depth: depth + 1, planner: planner) }
        case .array(let elements):
            for element in elements { walk(element, depth: depth + 1, planner: planner) }
        default:
            break
        }
    }

    private static func prefetchableURL(_ members: [String: JSONValue]) -> String? {
        guard let action = members["_beagleAction_"]?.stringValue,
            PrefetchPlanner.navigationActions.contains(action.lowercased()),
            members["route"]?["shouldPrefetch"] == .bool(true)
        else { return nil }
        return members["route"]?["url"]?.stringValue
    }

    private static func isPlainGET(_ route: JSONValue?) -> Bool {
        guard let additional = route?["httpAdditionalData"] else { return true }
        if let method = additional["method"], method != .null, method.stringValue?.uppercased() != "GET" {
            return false
        }
        if let body = additional["body"], body != .null { return false }
        return true
    }
}
