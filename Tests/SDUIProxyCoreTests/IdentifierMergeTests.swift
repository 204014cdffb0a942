import SDUIProxyCore
import Testing

/// The pure parts of merging a create's server identifier into the writes behind it: which local identifiers a
/// write names, the write rewritten, and the identifiers read from a create and from its answer.
@Suite("Local identifiers: what a write names, and the write with the backend's identifiers")
struct IdentifierMergeTests {
    static let local = LocalIdentifier("tmp-7f3a")!
    static let other = LocalIdentifier("tmp-b2")!
    static let pending: Set<LocalIdentifier> = [local, other]

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test(
        "a local identifier is 1 to 128 characters of A-Z a-z 0-9 . _ ~ -",
        arguments: [
            ("tmp-7f3a", true), ("a", true), ("A.b_c~d-9", true), (String(repeating: "x", count: 128), true),
            ("", false), (String(repeating: "x", count: 129), false), ("tmp 7f3a", false), ("tmp/7f3a", false),
            ("tmp%2F", false), ("tmp\"", false), ("é", false), ("a?b", false),
        ]
    )
    func tokens(text: String, valid: Bool) {
        #expect((LocalIdentifier(text) != nil) == valid)
        if !valid { #expect(!LocalIdentifier.refusal(of: text).isEmpty) }
    }

    // MARK: What a write names

    @Test(
        "a target names an identifier as a whole path segment or a whole query value, never as a part",
        arguments: [
            ("/api/orders/tmp-7f3a/items", ["tmp-7f3a"]),
            ("/api/orders/tmp-7f3a", ["tmp-7f3a"]),
            ("/api/pay?order=tmp-7f3a&x=1", ["tmp-7f3a"]),
            ("/api/pay?x=1&order=tmp-b2", ["tmp-b2"]),
            ("/api/orders/tmp-b2?order=tmp-7f3a", ["tmp-b2", "tmp-7f3a"]),
            ("/api/orders/tmp-7f3a1/items", []),
            ("/api/orders/xtmp-7f3a", []),
            ("/api/pay?tmp-7f3a=1", []),
            ("/api/pay?order=tmp-7f3a-2", []),
            ("/api/orders/tmp-7f3a/tmp-7f3a", ["tmp-7f3a"]),
            ("/", []),
        ]
    )
    func namedInTargets(target: String, named: [String]) {
        #expect(IdentifierReferences.named(in: target, among: Self.pending).map(\.value) == named)
    }

    @Test(
        "a JSON body names an identifier as a whole string value at any depth, never as a key or a part",
        arguments: [
            (#"{"order":"tmp-7f3a"}"#, ["tmp-7f3a"]),
            (#"{"a":{"b":[1,{"c":["x","tmp-b2"]}]},"d":"tmp-7f3a"}"#, ["tmp-b2", "tmp-7f3a"]),
            (#"["tmp-7f3a","tmp-7f3a"]"#, ["tmp-7f3a"]),
            (#""tmp-7f3a""#, ["tmp-7f3a"]),
            (#"{"tmp-7f3a":"x"}"#, []),
            (#"{"order":"tmp-7f3a1"}"#, []),
            (#"{"order":"my tmp-7f3a"}"#, []),
            (#"{"order":"tmp\u002d7f3a"}"#, ["tmp-7f3a"]),
            (#"{"order":"tmp\/7f3a"}"#, []),
            (#"{"order":"tmp-7f3a""#, []),
            (#"{"order":"tmp-7f3a"} trailing"#, []),
            ("order=tmp-7f3a", []),
            (#"{"n":-1.5e3,"t":true,"f":false,"z":null,"s":"tmp-b2"}"#, ["tmp-b2"]),
        ]
    )
    func namedInJSON(body: String, named: [String]) {
        #expect(IdentifierReferences.named(inJSON: Self.bytes(body), among: Self.pending).map(\.value) == named)
    }

    @Test("text that is not JSON has no string values: bad escapes, control bytes, lone surrogates, deep nesting")
    func notJSON() {
        for text in [
            #"{"a":"\x"}"#, "{\"a\":\"\u{01}\"}", #"{"a":"\ud800"}"#, #"{"a":01}"#, #"{"a":1.}"#, #"{a:"b"}"#,
            #"{"a":"b",}"#, #"["a" "b"]"#, "", " ",
            String(repeating: "[", count: JSONStringValues.maximumDepth + 2)
                + String(repeating: "]", count: JSONStringValues.maximumDepth + 2),
        ] {
            #expect(JSONStringValues.values(in: Self.bytes(text)) == nil, "\(text.prefix(40))")
        }
        let surrogatePair = JSONStringValues.values(in: Self.bytes(#"["\ud83d\ude00"]"#))
        #expect(surrogatePair?.map(\.text) == ["😀"])
    }

    // MARK: The rewrite

    static let mapping: [LocalIdentifier: RemoteIdentifier] = [
        local: RemoteIdentifier("R1")!, other: RemoteIdentifier("42", isNumber: true)!,
    ]

    @Test("a target gets the backend's identifiers in place of whole segments and query values only")
    func rewrittenTargets() {
        #expect(
            IdentifierReferences.rewritten("/api/orders/tmp-7f3a/items", with: Self.mapping) == "/api/orders/R1/items"
        )
        #expect(
            IdentifierReferences.rewritten("/api/pay?order=tmp-7f3a&n=tmp-b2&k=tmp-7f3ax", with: Self.mapping)
                == "/api/pay?order=R1&n=42&k=tmp-7f3ax"
        )
        #expect(IdentifierReferences.rewritten("/api/orders/tmp-7f3a1", with: Self.mapping) == "/api/orders/tmp-7f3a1")
        #expect(IdentifierReferences.rewritten("/api/x", with: [:]) == "/api/x")
    }

    @Test("a JSON body keeps every byte but the identifiers' tokens; a number replaces a string as a number")
    func rewrittenJSON() {
        let body = Self.bytes(#"{ "order" : "tmp-7f3a", "tmp-7f3a": ["tmp-b2", "tmp-7f3a1"], "note":"tmp\u002d7f3a" }"#)
        let rewritten = IdentifierReferences.rewritten(json: body, with: Self.mapping)
        #expect(
            rewritten.map { String(decoding: $0, as: UTF8.self) }
                == #"{ "order" : "R1", "tmp-7f3a": [42, "tmp-7f3a1"], "note":"R1" }"#
        )
        #expect(IdentifierReferences.rewritten(json: Self.bytes(#"{"order":"other"}"#), with: Self.mapping) == nil)
        #expect(IdentifierReferences.rewritten(json: Self.bytes("order=tmp-7f3a"), with: Self.mapping) == nil)
    }

    // MARK: Reading the identifiers

    static func headers(_ fields: [String: String]) -> (String) -> String? {
        { name in fields.first { $0.key.lowercased() == name.lowercased() }?.value }
    }

    @Test("a create's local identifier from a header or a JSON pointer; none, or not a token, is refused in words")
    func localIdentifiers() throws {
        let byHeader = CreateRule(localId: .header("X-Local-Id"), remoteId: .json(JSONPointer("/id")!))
        #expect(
            try byHeader.localIdentifier(header: Self.headers(["x-local-id": "tmp-7f3a"]), body: []).get() == Self.local
        )
        let missing = byHeader.localIdentifier(header: Self.headers([:]), body: [])
        #expect(missing == .failure(CreateRule.Refusal(reason: "a create needs its local identifier in X-Local-Id")))
        let bad = byHeader.localIdentifier(header: Self.headers(["X-Local-Id": "tmp 1"]), body: [])
        #expect(bad == .failure(CreateRule.Refusal(reason: LocalIdentifier.refusal(of: "tmp 1"))))

        let byBody = CreateRule(localId: .json(JSONPointer("/meta/localId")!), remoteId: .json(JSONPointer("/id")!))
        let body = Self.bytes(#"{"meta":{"localId":"tmp-b2"},"items":[]}"#)
        #expect(try byBody.localIdentifier(header: Self.headers([:]), body: body).get() == Self.other)
        let number = byBody.localIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"meta":{"localId":7}}"#))
        #expect(throws: CreateRule.Refusal.self) { try number.get() }
    }

    @Test("the backend's identifier from a JSON pointer (string or integer) or a header, with or without a pattern")
    func remoteIdentifiers() {
        let byBody = CreateRule(localId: .header("X-Local-Id"), remoteId: .json(JSONPointer("/id")!))
        #expect(byBody.remoteIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"id":"R1"}"#))?.text == "R1")
        let numeric = byBody.remoteIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"x":[],"id":42}"#))
        #expect(numeric == RemoteIdentifier("42", isNumber: true))
        #expect(byBody.remoteIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"id":4.5}"#)) == nil)
        #expect(byBody.remoteIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"id":"R 1"}"#)) == nil)
        #expect(byBody.remoteIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"id":{"v":1}}"#)) == nil)
        #expect(byBody.remoteIdentifier(header: Self.headers([:]), body: Self.bytes(#"{"id":"R1""#)) == nil)

        let byLocation = CreateRule(
            localId: .header("X-Local-Id"),
            remoteId: .headerPattern("Location", pattern: "/api/orders/{id}")
        )
        for location in ["/api/orders/R1", "https://backend:8443/api/orders/R1", "/api/orders/R1?view=full"] {
            #expect(byLocation.remoteIdentifier(header: Self.headers(["Location": location]), body: [])?.text == "R1")
        }
        for location in ["/api/carts/R1", "/api/orders/", "/api/orders/R1/items", "/api/orders/R%201"] {
            #expect(byLocation.remoteIdentifier(header: Self.headers(["Location": location]), body: []) == nil)
        }
        let byHeader = CreateRule(localId: .header("X-Local-Id"), remoteId: .header("X-Id"))
        #expect(byHeader.remoteIdentifier(header: Self.headers(["X-Id": "R9"]), body: [])?.text == "R9")
    }

    @Test(
        "JSON pointers: escapes, indexes, the whole text, and what is not one",
        arguments: [
            ("", #""whole""#, JSONPointer.Scalar.string("whole")),
            ("/a~1b/m~0n", #"{"a/b":{"m~n":"x"}}"#, .string("x")),
            ("/list/1", #"{"list":["a","b"]}"#, .string("b")),
            ("/list/01", #"{"list":["a","b"]}"#, nil),
            ("/list/2", #"{"list":["a","b"]}"#, nil),
            ("/n", #"{"n":-12}"#, .number("-12")),
            ("/missing", #"{"n":1}"#, nil),
        ]
    )
    func pointers(pointer: String, json: String, expected: JSONPointer.Scalar?) throws {
        #expect(try #require(JSONPointer(pointer)).scalar(in: Self.bytes(json)) == expected)
    }

    @Test("a pointer must be empty or start with a slash, and ~ must be ~0 or ~1")
    func badPointers() {
        for text in ["id", "/a~", "/a~2"] { #expect(JSONPointer(text) == nil, "\(text)") }
    }
}
