import Foundation
import NIOCore
import Testing

@testable import SDUIProxyCore

@Suite("Component decoding and the JSON parser")
struct ComponentDecoderTests {
    let decoder = ComponentDecoder()
    let planner = PrefetchPlanner(upstream: try! UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])

    /// Whether the one-pass validation with planning accepts `body`; it must agree with ``validateComponent``.
    func validatesWhilePlanning(_ body: ByteBuffer) -> Bool {
        (try? decoder.validateComponent(body, planningWith: planner)) != nil
    }

    @Test(
        "every Beagle fixture parses to the same tree as Foundation's decoder",
        arguments: try! Fixtures.beagleFixtureNames()
    )
    func fixturesParse(name: String) throws {
        let data = try Fixtures.data(name)
        let ours = try decoder.decodeJSON(ByteBuffer(bytes: data))
        let foundations = try JSONDecoder().decode(JSONValue.self, from: data)
        #expect(ours == foundations)
    }

    @Test(
        "components are told from actions and other JSON, the same way with and without a tree",
        arguments: try! Fixtures.beagleFixtureNames()
    )
    func componentsAndActions(name: String) throws {
        let body = ByteBuffer(bytes: try Fixtures.data(name))
        let tree = try? decoder.decodeComponent(body)
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
            let url = Fixtures.repositoryRoot.appendingPathComponent("config/samples/screens/\(name).json")
            try decoder.validateComponent(ByteBuffer(bytes: try Data(contentsOf: url)))
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
        #expect(throws: ComponentDecoder.Failure.self) { try decoder.decodeJSON(ByteBuffer(string: text)) }
        #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(string: text)) }
        #expect(!validatesWhilePlanning(ByteBuffer(string: text)))
    }

    @Test("invalid UTF-8 in a string is refused")
    func invalidUTF8() {
        let bytes: [UInt8] = Array(#"{"_beagleComponent_":"a","t":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: ComponentDecoder.Failure.self) { try decoder.decodeJSON(ByteBuffer(bytes: bytes)) }
        #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(bytes: bytes)) }
        #expect(!validatesWhilePlanning(ByteBuffer(bytes: bytes)))
    }

    @Test("escapes, numbers and nesting decode to the right values")
    func values() throws {
        let text =
            #"{"s":"a\"b\\c\/d\n\u00e9\ud83d\ude00","n":[-1.5e2,0,12],"t":true,"f":false,"z":null,"o":{"p":[{}]}}"#
        let value = try decoder.decodeJSON(ByteBuffer(string: text))
        #expect(value["s"] == .string("a\"b\\c/d\né😀"))
        #expect(value["n"] == .array([.number(-150), .number(0), .number(12)]))
        #expect(value["t"] == .bool(true))
        #expect(value["z"] == .null)
        #expect(value["o"]?["p"] == .array([.object([:])]))
    }

    @Test("a component needs a non-empty string type at its root")
    func componentRule() {
        for text in [
            #"{"_beagleComponent_":""}"#, #"{"_beagleComponent_":3}"#, #"{"child":{"_beagleComponent_":"a"}}"#, "[]",
        ] {
            #expect(throws: ComponentDecoder.Failure.self) { try decoder.validateComponent(ByteBuffer(string: text)) }
            #expect(throws: ComponentDecoder.Failure.self) { try decoder.decodeComponent(ByteBuffer(string: text)) }
            #expect(!validatesWhilePlanning(ByteBuffer(string: text)))
        }
        let component = ByteBuffer(string: #" {"x":[1,{"y":"z"}], "_beagleComponent_" : "beagle:text" } "#)
        #expect(throws: Never.self) { try decoder.validateComponent(component) }
        #expect(validatesWhilePlanning(component))
        #expect(validatesWhilePlanning(ByteBuffer(string: #"{"\u005fbeagleComponent_":"a"}"#)))
        #expect(!validatesWhilePlanning(ByteBuffer(string: #"{"_beagleComponent_":"a","x":{"#)))
    }

    @Test("content types that count as JSON")
    func jsonContentTypes() {
        #expect(ComponentDecoder.isJSON(contentType: "application/json"))
        #expect(ComponentDecoder.isJSON(contentType: "application/json; charset=utf-8"))
        #expect(ComponentDecoder.isJSON(contentType: "application/vnd.beagle+json"))
        #expect(!ComponentDecoder.isJSON(contentType: "text/json"))
        #expect(!ComponentDecoder.isJSON(contentType: "image/png"))
        #expect(!ComponentDecoder.isJSON(contentType: nil))
    }
}
