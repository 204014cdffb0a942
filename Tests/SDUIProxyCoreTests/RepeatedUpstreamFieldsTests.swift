import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("A connection's upstream fields, built again only when what they are built from changes")
struct RepeatedUpstreamFieldsTests {
    private static let configured = [("X-Api-Key", "secret"), ("x-tenant", "t1")]

    /// One request's inputs to the builder.
    private struct Inputs: Equatable {
        var headers: [(String, String)]
        var noted: RequestFieldPresence?
        var platform: String
        var address: String?
        var purpose: UpstreamRequestBuilder.Purpose
        var trusted: Bool
        var hostIsKeyed: Bool
        var received: UpstreamRequestBuilder.Received

        static func == (lhs: Inputs, rhs: Inputs) -> Bool {
            lhs.headers.map { [$0.0, $0.1] } == rhs.headers.map { [$0.0, $0.1] } && lhs.noted == rhs.noted
                && lhs.platform == rhs.platform && lhs.address == rhs.address && lhs.purpose == rhs.purpose
                && lhs.trusted == rhs.trusted && lhs.hostIsKeyed == rhs.hostIsKeyed && lhs.received == rhs.received
        }

        func fields(_ builder: UpstreamRequestBuilder, reusing repeated: RepeatedUpstreamFields?) -> [[String]] {
            builder.fields(
                from: HTTPHeaders(headers),
                noted: noted,
                platform: platform,
                clientAddress: address,
                purpose: purpose,
                clientIsTrustedProxy: trusted,
                hostIsKeyed: hostIsKeyed,
                received: received,
                reusing: repeated
            ).headers.map { [$0.name, $0.value] }
        }
    }

    /// `inputs` with one of its parts changed, chosen by `choice`.
    private static func changing(_ inputs: Inputs, _ choice: UInt64) -> Inputs {
        var changed = inputs
        switch choice % 9 {
        case 0: changed.headers.append(("Accept-Language", "pt-BR"))
        case 1: changed.headers = changed.headers.map { ($0.0, $0.1 + "x") }
        case 2: changed.noted = changed.noted == nil ? [] : nil
        case 3: changed.platform = changed.platform == "IOS" ? "ANDROID" : "IOS"
        case 4: changed.address = changed.address == nil ? "10.0.0.9" : nil
        case 5: changed.purpose = changed.purpose == .cacheFill ? .passThrough : .cacheFill
        case 6: changed.trusted.toggle()
        case 7: changed.hostIsKeyed.toggle()
        default:
            changed.received =
                changed.received.version == .http1_1 ? .init(version: .http1_0, isSecure: true) : .http1_1
        }
        return changed
    }

    @Test("whatever changes from one request to the next, the fields are those a build from scratch makes")
    func reusedFieldsAreTheBuiltOnes() {
        let builder = UpstreamRequestBuilder(platformHeader: "beagle-platform", configuredHeaders: Self.configured)
        let repeated = RepeatedUpstreamFields()
        var inputs = Inputs(
            headers: [("Host", "proxy"), ("beagle-platform", "IOS"), ("X-Forwarded-For", "10.1.1.1")],
            noted: nil,
            platform: "IOS",
            address: "127.0.0.1",
            purpose: .cacheFill,
            trusted: false,
            hostIsKeyed: false,
            received: .http1_1
        )
        var random = SplitMix64(seed: 0x0F1E_1D5)
        var same = 0
        for round in 0..<2000 {
            let next = random.next() % 3 == 0 ? Self.changing(inputs, random.next()) : inputs
            if round > 0, next == inputs { same += 1 }
            inputs = next
            #expect(inputs.fields(builder, reusing: repeated) == inputs.fields(builder, reusing: nil), "round \(round)")
        }
        // Every request whose inputs were the last one's, and only those, was handed the last fields again.
        #expect(same > 1000 && repeated.reuses == same)
    }

    @Test("the same request built by another configuration's builder gets that builder's fields")
    func anotherBuilderBuildsItsOwn() {
        let first = UpstreamRequestBuilder(platformHeader: "beagle-platform", configuredHeaders: Self.configured)
        let reloaded = UpstreamRequestBuilder(
            platformHeader: "beagle-platform",
            configuredHeaders: [("X-Api-Key", "rotated")]
        )
        let repeated = RepeatedUpstreamFields()
        let request = Inputs(
            headers: [("Host", "proxy")],
            noted: nil,
            platform: "WEB",
            address: "127.0.0.1",
            purpose: .passThrough,
            trusted: false,
            hostIsKeyed: false,
            received: .http1_1
        )
        let before = request.fields(first, reusing: repeated)
        #expect(request.fields(first, reusing: repeated) == before && repeated.reuses == 1)
        let after = request.fields(reloaded, reusing: repeated)
        #expect(after == request.fields(reloaded, reusing: nil) && after.contains(["X-Api-Key", "rotated"]))
        #expect(repeated.reuses == 1)
    }
}
