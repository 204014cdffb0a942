import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

/// Fields checked for the wire once (``HTTPFieldLines/checkForWire()``), so that a connection's repeated upstream
/// fields are not checked again on every request: what is skipped must be exactly what was checked.
@Suite("Fields checked once for the wire")
struct WireCheckedFieldsTests {
    /// Names and values, some of which HTTP does not allow on a request line.
    private static let names = ["Accept", "X-Request-Id", "beagle-platform", "Via", "bad name", "", "Host", "X(y)"]
    private static let values = ["*/*", "IOS", "", "1.1 proxy", "a\r\nInjected: 1", "tab\tok", "nul\u{0}", "é"]

    /// What the encoder makes of `fields`: the head's bytes, or why it refused.
    private func encoded(_ fields: HTTPFieldLines) -> String {
        do {
            let buffer = try HTTPWireFormat.encodeRequest(
                method: .GET,
                target: "/screens/home",
                host: "backend:8080",
                fields: fields,
                body: nil
            )
            return String(buffer: buffer)
        } catch {
            return "refused: \(error.message)"
        }
    }

    /// The same fields, made anew: nothing known checked.
    private func unchecked(_ fields: HTTPFieldLines) -> HTTPFieldLines {
        var copy = HTTPFieldLines()
        for (name, value) in fields.headers { copy.add(name: name, value: value) }
        return copy
    }

    @Test("random edits and checks: the fields known checked are a prefix HTTP allows, and the wire is unchanged")
    func checkedPrefixHoldsThroughEdits() {
        var random = SplitMix64(seed: 0x51DE_CA7)
        var checks = 0
        for round in 0..<400 {
            var fields = HTTPFieldLines()
            for step in 0..<12 {
                switch random.next() % 4 {
                case 0, 1:
                    let name = Self.names[Int(random.next() % UInt64(Self.names.count))]
                    let value = Self.values[Int(random.next() % UInt64(Self.values.count))]
                    fields.add(name: name, value: value)
                case 2:
                    let name = Self.names[Int(random.next() % UInt64(Self.names.count))]
                    fields.remove(name: random.next() % 2 == 0 ? name : name.uppercased())
                default:
                    fields.checkForWire()
                    checks += 1
                    // As many as pass from the first on: the first that does not ends the count.
                    let leading = fields.headers.prefix { isWireField($0.name, $0.value) }
                    #expect(fields.wireCheckedCount == leading.count, "round \(round) step \(step)")
                }
                var index = 0
                fields.forEachField { name, value in
                    if index < fields.wireCheckedCount {
                        #expect(HTTPWireFormat.isWireField(name: name, value: value), "round \(round) step \(step)")
                    }
                    index += 1
                }
                #expect(encoded(fields) == encoded(unchecked(fields)), "round \(round) step \(step)")
            }
        }
        #expect(checks > 1000)
    }

    @Test("a field HTTP does not allow, added after checked ones, is still refused")
    func uncheckedFieldAfterCheckedOnesIsRefused() {
        var fields = HTTPFieldLines()
        fields.add(name: "Accept", value: "*/*")
        fields.checkForWire()
        #expect(fields.wireCheckedCount == 1)
        fields.add(name: "X-Note", value: "a\r\nInjected: 1")
        #expect(fields.wireCheckedCount == 1)
        #expect(encoded(fields) == "refused: a header HTTP does not allow in the upstream request: X-Note")
    }

    @Test("the upstream fields a connection keeps are checked once, when kept, and handed out checked")
    func keptUpstreamFieldsAreChecked() {
        let builder = UpstreamRequestBuilder(platformHeader: "beagle-platform", configuredHeaders: [])
        let repeated = RepeatedUpstreamFields()
        let headers = HTTPHeaders([("Host", "proxy"), ("Accept", "application/json"), ("beagle-platform", "IOS")])
        for _ in 0..<2 {
            let fields = builder.fields(
                from: headers,
                platform: "IOS",
                clientAddress: "127.0.0.1",
                purpose: .cacheFill,
                reusing: repeated
            )
            #expect(fields.count > 0 && fields.wireCheckedCount == fields.count)
            #expect(encoded(fields) == encoded(unchecked(fields)))
        }
        // Without a memo nothing is checked ahead: the encoder checks every field.
        let alone = builder.fields(from: headers, platform: "IOS", clientAddress: "127.0.0.1", purpose: .cacheFill)
        #expect(alone.wireCheckedCount == 0)
    }
}

/// ``HTTPWireFormat/isWireField(name:value:)`` for a name and value given as strings.
private func isWireField(_ name: String, _ value: String) -> Bool {
    Array(name.utf8).withUnsafeBytes { name in
        Array(value.utf8).withUnsafeBytes { value in HTTPWireFormat.isWireField(name: name, value: value) }
    }
}
