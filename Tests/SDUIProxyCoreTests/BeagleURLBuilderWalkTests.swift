import Testing

@testable import SDUIProxyCore

@Suite("A path's encoding decided in one walk, as by encoding first and checking after")
struct BeagleURLBuilderWalkTests {
    /// The rule as first written: encode a path without `%`, then check whatever came out.
    private static func reference(base: String?, path: String) -> String? {
        guard !path.isEmpty else { return nil }
        let encoded = path.utf8.contains(UInt8(ascii: "%")) ? path : BeagleURLBuilder.percentEncode(path)
        guard BeagleURLBuilder.isValidURIReference(encoded) else { return nil }
        guard path.utf8.first == UInt8(ascii: "/"), var base, !base.isEmpty else { return encoded }
        guard BeagleURLBuilder.isValidURIReference(base) else { return nil }
        if base.utf8.last == UInt8(ascii: "/") { base.removeLast() }
        return base + encoded
    }

    @Test("every byte alone, and random paths of allowed, escaped and unencoded characters, build the same URL")
    func sameAsEncodingFirst() {
        for byte in 0...UInt8.max {
            let path = String(decoding: [UInt8(ascii: "/"), byte, UInt8(ascii: "a")], as: UTF8.self)
            #expect(BeagleURLBuilder.build(base: nil, path: path) == Self.reference(base: nil, path: path))
        }
        var generator = SystemRandomNumberGenerator()
        let pieces = [
            "/", "a", "Z", "9", "-", "~", "?", "#", "=", "&", "%", "%2F", "%2", "%zz", " ", "é", "<", "\"", "|",
        ]
        for round in 0..<5_000 {
            let path = (0..<Int.random(in: 0...12, using: &generator)).map { _ in
                pieces.randomElement(using: &generator)!
            }.joined()
            let base = ["https://api.example.com/", "http://h/v2", nil, "bad base"].randomElement(using: &generator)!
            #expect(
                BeagleURLBuilder.build(base: base, path: path) == Self.reference(base: base, path: path),
                "round \(round): \(base ?? "nil") + \(path)"
            )
        }
    }

    @Test("a walk tells the three kinds of path apart")
    func kinds() {
        #expect(BeagleURLBuilder.classify("/screens/home?tab=1") == .allowed)
        #expect(BeagleURLBuilder.classify("/a%20b") == .escaped)
        #expect(BeagleURLBuilder.classify("/a b%") == .escaped)
        #expect(BeagleURLBuilder.classify("/a b") == .unencoded)
        #expect(BeagleURLBuilder.classify("/é") == .unencoded)
    }
}
