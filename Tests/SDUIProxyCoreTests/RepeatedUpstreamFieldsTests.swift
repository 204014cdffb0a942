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

        /// Equal as bytes: `String`'s `==` holds canonically equivalent spellings equal.
        static func == (lhs: Inputs, rhs: Inputs) -> Bool {
            func bytes(_ text: String?) -> [UInt8]? { text.map { Array($0.utf8) } }
            return lhs.headers.map { [Array($0.0.utf8), Array($0.1.utf8)] }
                == rhs.headers.map { [Array($0.0.utf8), Array($0.1.utf8)] } && lhs.noted == rhs.noted
                && bytes(lhs.platform) == bytes(rhs.platform) && bytes(lhs.address) == bytes(rhs.address)
                && lhs.purpose == rhs.purpose && lhs.trusted == rhs.trusted && lhs.hostIsKeyed == rhs.hostIsKeyed
                && lhs.received == rhs.received
        }

        /// The fields built, as the bytes of each name and value.
        func fields(_ builder: UpstreamRequestBuilder, reusing repeated: RepeatedUpstreamFields?) -> [[[UInt8]]] {
            var lines: [[[UInt8]]] = []
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
            ).forEachField { lines.append([Array($0), Array($1)]) }
            return lines
        }

        /// Whether `repeated` would hand out the fields it keeps for these inputs.
        func isKept(in repeated: RepeatedUpstreamFields, by builder: UpstreamRequestBuilder) -> Bool {
            repeated.fields(
                builtBy: builder.identity,
                from: HTTPHeaders(headers),
                noted: noted,
                platform: platform,
                clientAddress: address,
                purpose: purpose,
                clientIsTrustedProxy: trusted,
                hostIsKeyed: hostIsKeyed,
                received: received
            ) != nil
        }
    }

    private static let firstHeaders = [("Host", "proxy"), ("beagle-platform", "IOS"), ("X-Forwarded-For", "10.1.1.1")]

    /// `inputs` with one of its parts changed, chosen by `choice`; fields that have grown long start over, well
    /// below the bound of what is kept.
    private static func changing(_ inputs: Inputs, _ choice: UInt64) -> Inputs {
        var changed = inputs
        if changed.headers.reduce(0, { $0 + $1.0.utf8.count + $1.1.utf8.count }) > 1_000 {
            changed.headers = firstHeaders
        }
        switch choice % 10 {
        case 0: changed.headers.append(("Accept-Language", "pt-BR"))
        case 1: changed.headers = changed.headers.map { ($0.0, $0.1 + "x") }
        // The same character spelled otherwise: a letter and a combining accent, or the accented letter.
        case 8:
            let spelled = changed.headers.last?.1 == "e\u{301}" ? "\u{E9}" : "e\u{301}"
            changed.headers.append(("X-Name", spelled))
        case 2: changed.noted = changed.noted == nil ? [] : nil
        case 3: changed.platform = changed.platform == "IOS" ? "ANDROID" : "IOS"
        case 4: changed.address = changed.address == nil ? "10.0.0.9" : nil
        case 5: changed.purpose = changed.purpose == .cacheFill ? .passThrough : .cacheFill
        case 6: changed.trusted.toggle()
        case 7: changed.hostIsKeyed.toggle()
        case 9:
            // Only the spelling of the last value changes, canonically the same text.
            if let last = changed.headers.popLast() {
                changed.headers.append(
                    (last.0, last.1 == "e\u{301}" ? "\u{E9}" : last.1 == "\u{E9}" ? "e\u{301}" : "e\u{301}")
                )
            }
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
            headers: Self.firstHeaders,
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
        var respelled = 0
        for round in 0..<3000 {
            let next = random.next() % 3 == 0 ? Self.changing(inputs, random.next()) : inputs
            // Every request whose inputs are the last one's, and only those, is handed the last fields again.
            #expect(next.isKept(in: repeated, by: builder) == (round > 0 && next == inputs), "round \(round)")
            if round > 0, next == inputs { same += 1 }
            if next != inputs, next.headers.map(\.1) == inputs.headers.map(\.1) { respelled += 1 }
            inputs = next
            #expect(inputs.fields(builder, reusing: repeated) == inputs.fields(builder, reusing: nil), "round \(round)")
        }
        #expect(same > 1500)
        // Requests whose fields differ from the last one's only in how a character is spelled.
        #expect(respelled > 20)
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
        #expect(request.isKept(in: repeated, by: first) && !request.isKept(in: repeated, by: reloaded))
        #expect(request.fields(first, reusing: repeated) == before)
        let after = request.fields(reloaded, reusing: repeated)
        #expect(after == request.fields(reloaded, reusing: nil))
        #expect(after.contains([Array("X-Api-Key".utf8), Array("rotated".utf8)]))
    }

    @Test("client fields longer than the kept bound are built every time, and what was kept before is let go")
    func longClientFieldsAreNotKept() {
        let builder = UpstreamRequestBuilder(platformHeader: "beagle-platform", configuredHeaders: Self.configured)
        let repeated = RepeatedUpstreamFields()
        func request(cookie: Int) -> Inputs {
            Inputs(
                headers: [("Host", "p"), ("Cookie", String(repeating: "c", count: cookie))],
                noted: nil,
                platform: "IOS",
                address: "127.0.0.1",
                purpose: .passThrough,
                trusted: false,
                hostIsKeyed: false,
                received: .http1_1
            )
        }
        // Names and values of exactly the bound are kept; one byte more is not, and the last kept goes.
        let fitting = request(cookie: RepeatedUpstreamFields.maximumClientFieldBytes - "HostpCookie".utf8.count)
        _ = fitting.fields(builder, reusing: repeated)
        #expect(fitting.isKept(in: repeated, by: builder))
        let longer = request(cookie: RepeatedUpstreamFields.maximumClientFieldBytes - "HostpCookie".utf8.count + 1)
        #expect(longer.fields(builder, reusing: repeated) == longer.fields(builder, reusing: nil))
        #expect(!longer.isKept(in: repeated, by: builder) && !fitting.isKept(in: repeated, by: builder))
    }
}
