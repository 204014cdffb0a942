import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("The headers of an upstream request")
struct UpstreamRequestBuilderTests {
    private let builder = UpstreamRequestBuilder(
        platformHeader: "beagle-platform",
        configuredHeaders: [("X-Api-Key", "secret"), ("Content-Type", "application/json"), ("x-tenant", "t1")]
    )

    private func pairs(_ headers: HTTPHeaders) -> [[String]] { headers.map { [$0.name, $0.value] } }

    @Test("a cache fill: the client's end-to-end headers, then the configured ones, the platform and the hop")
    func cacheFill() {
        let client = HTTPHeaders([
            ("Host", "proxy.example"), ("Accept", "application/json"), ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "dropped"), ("Keep-Alive", "timeout=5"), ("BEAGLE-PLATFORM", "WEB"), ("If-None-Match", "\"a\""),
            ("Range", "bytes=0-1"), ("Accept-Encoding", "gzip"), ("beagle-hash", "00"), ("X-Tenant", "client's"),
            ("X-Forwarded-For", "10.0.0.1"), ("Accept-Language", "pt-BR"), ("x-forwarded-for", "10.0.0.2"),
        ])
        let headers = builder.fields(from: client, platform: "IOS", clientAddress: "127.0.0.1", purpose: .cacheFill)
            .headers
        #expect(
            pairs(headers) == [
                ["Accept", "application/json"], ["Accept-Language", "pt-BR"], ["X-Api-Key", "secret"],
                ["Content-Type", "application/json"], ["x-tenant", "t1"], ["beagle-platform", "IOS"],
                ["Accept-Encoding", "identity"], ["Via", "1.1 sdui-proxy"], ["X-Forwarded-For", "127.0.0.1"],
                ["X-Forwarded-Proto", "http"], ["Forwarded", "for=127.0.0.1;proto=http"],
            ]
        )
    }

    @Test("a pass-through keeps conditional, range and encoding headers, and the client's Content-Type")
    func passThrough() {
        let client = HTTPHeaders([
            ("Content-Type", "text/plain"), ("If-None-Match", "\"a\""), ("Accept-Encoding", "gzip"),
            ("Content-Length", "4"), ("TE", "trailers"), ("Transfer-Encoding", "chunked"),
        ])
        let headers = builder.fields(from: client, platform: "ANDROID", clientAddress: nil, purpose: .passThrough)
            .headers
        #expect(
            pairs(headers) == [
                ["Content-Type", "text/plain"], ["If-None-Match", "\"a\""], ["Accept-Encoding", "gzip"],
                ["Content-Length", "4"], ["X-Api-Key", "secret"], ["x-tenant", "t1"], ["beagle-platform", "ANDROID"],
                ["Via", "1.1 sdui-proxy"], ["X-Forwarded-Proto", "http"], ["Forwarded", "for=unknown;proto=http"],
            ]
        )
    }

    @Test(
        "Via names the protocol received and the forwarding fields the scheme: 2 for HTTP/2, https over TLS",
        arguments: [
            (HTTPVersion(major: 2, minor: 0), true, "2 sdui-proxy", "https"),
            (HTTPVersion(major: 2, minor: 0), false, "2 sdui-proxy", "http"),
            (HTTPVersion.http1_1, true, "1.1 sdui-proxy", "https"),
            (HTTPVersion.http1_0, false, "1.0 sdui-proxy", "http"),
        ]
    )
    func receivedProtocol(version: HTTPVersion, secure: Bool, via: String, scheme: String) {
        let headers = builder.fields(
            from: [:],
            platform: "WEB",
            clientAddress: "10.1.2.3",
            purpose: .passThrough,
            received: .init(version: version, isSecure: secure)
        ).headers
        #expect(headers["Via"] == [via])
        #expect(headers["X-Forwarded-Proto"] == [scheme])
        #expect(headers["Forwarded"] == ["for=10.1.2.3;proto=\(scheme)"])
    }

    @Test("from a trusted proxy without the client's address, its X-Forwarded-For goes on as it was")
    func forwardedForWithoutAddress() {
        let client = HTTPHeaders([("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "10.0.0.2")])
        let headers = builder.fields(
            from: client,
            platform: "WEB",
            clientAddress: nil,
            purpose: .cacheFill,
            clientIsTrustedProxy: true
        ).headers
        #expect(headers["X-Forwarded-For"] == ["10.0.0.1, 10.0.0.2"])
        let none = builder.fields(from: [:], platform: "WEB", clientAddress: nil, purpose: .cacheFill).headers
        #expect(!none.contains(name: "x-forwarded-for"))
    }

    /// What a client may claim about where a request came from.
    private static let claims = HTTPHeaders([
        ("Host", "proxy.example"), ("X-Forwarded-For", "10.9.9.9"), ("X-Forwarded-Host", "evil.example"),
        ("X-Forwarded-Proto", "https"), ("X-Forwarded-Port", "443"), ("X-Forwarded-Prefix", "/evil"),
        ("Forwarded", "for=10.9.9.9;host=evil.example"), ("X-Real-IP", "10.9.9.9"), ("Accept", "*/*"),
    ])

    private func forwardingFields(_ headers: HTTPHeaders) -> [[String]] {
        pairs(headers).filter { pair in
            let name = pair[0].lowercased()
            return name == "forwarded" || name == "x-real-ip" || name.hasPrefix("x-forwarded-")
        }
    }

    @Test("an untrusted client's forwarding headers are replaced by what the proxy saw, on every purpose")
    func untrustedClaimsReplaced() {
        let fill = builder.fields(from: Self.claims, platform: "WEB", clientAddress: "192.0.2.7", purpose: .cacheFill)
            .headers
        #expect(
            forwardingFields(fill) == [
                ["X-Forwarded-For", "192.0.2.7"], ["X-Forwarded-Proto", "http"],
                ["Forwarded", "for=192.0.2.7;proto=http"],
            ]
        )
        #expect(fill["accept"] == ["*/*"])
        let passed = builder.fields(
            from: Self.claims,
            platform: "WEB",
            clientAddress: "2001:db8::7",
            purpose: .passThrough
        ).headers
        #expect(
            forwardingFields(passed) == [
                ["X-Forwarded-For", "2001:db8::7"], ["X-Forwarded-Proto", "http"],
                ["X-Forwarded-Host", "proxy.example"],
                ["Forwarded", #"for="[2001:db8::7]";proto=http;host=proxy.example"#],
            ]
        )
    }

    @Test(
        "RFC 9110 §5.6.4: a host that is no token is a quoted-string, quotes and backslashes escaped, every other byte kept"
    )
    func quotedHost() {
        func host(_ host: String) -> String {
            UpstreamRequestBuilder.forwardedElement(for: "192.0.2.7", host: host, secure: true)
        }
        #expect(host("proxy.example:8080") == #"for=192.0.2.7;proto=https;host="proxy.example:8080""#)
        #expect(host(#"a"b\c"#) == #"for=192.0.2.7;proto=https;host="a\"b\\c""#)
        #expect(host("") == "for=192.0.2.7;proto=https;host=")
        #expect(host("é") == "for=192.0.2.7;proto=https;host=\"é\"")
        #expect(host("proxy.example") == "for=192.0.2.7;proto=https;host=proxy.example")
        #expect(
            UpstreamRequestBuilder.forwardedElement(for: "::1", host: nil) == #"for="[::1]";proto=http"#
        )
        #expect(UpstreamRequestBuilder.forwardedElement(for: nil, host: "a:1") == #"for=unknown;proto=http;host="a:1""#)
    }

    @Test("a cache fill names the client's Host only when the route's key holds it")
    func hostOnCacheFillOnlyWhenKeyed() {
        let client = HTTPHeaders([("Host", "proxy.example:8080")])
        let unkeyed = builder.fields(from: client, platform: "WEB", clientAddress: "192.0.2.7", purpose: .cacheFill)
            .headers
        #expect(!unkeyed.contains(name: "x-forwarded-host"))
        #expect(unkeyed["forwarded"] == ["for=192.0.2.7;proto=http"])
        let keyed = builder.fields(
            from: client,
            platform: "WEB",
            clientAddress: "192.0.2.7",
            purpose: .cacheFill,
            hostIsKeyed: true
        ).headers
        #expect(keyed["x-forwarded-host"] == ["proxy.example:8080"])
        #expect(keyed["forwarded"] == [#"for=192.0.2.7;proto=http;host="proxy.example:8080""#])
    }

    @Test("a trusted proxy's forwarding headers are kept and this hop appended")
    func trustedProxyAppends() {
        let passed = builder.fields(
            from: Self.claims,
            platform: "WEB",
            clientAddress: "10.0.0.2",
            purpose: .passThrough,
            clientIsTrustedProxy: true
        ).headers
        #expect(
            forwardingFields(passed) == [
                ["X-Forwarded-Host", "evil.example"], ["X-Forwarded-Proto", "https"], ["X-Forwarded-Port", "443"],
                ["X-Forwarded-Prefix", "/evil"], ["X-Real-IP", "10.9.9.9"], ["X-Forwarded-For", "10.9.9.9, 10.0.0.2"],
                ["Forwarded", "for=10.9.9.9;host=evil.example, for=10.0.0.2;proto=http;host=proxy.example"],
            ]
        )
        // On a cache fill whose key does not hold the Host, not even a trusted proxy's X-Forwarded-Host goes on.
        let fill = builder.fields(
            from: Self.claims,
            platform: "WEB",
            clientAddress: "10.0.0.2",
            purpose: .cacheFill,
            clientIsTrustedProxy: true
        ).headers
        #expect(!fill.contains(name: "x-forwarded-host"))
        #expect(fill["x-forwarded-for"] == ["10.9.9.9, 10.0.0.2"])
        // Nor its Forwarded, whose host= would go unkeyed: only this hop's element.
        #expect(fill["forwarded"] == ["for=10.0.0.2;proto=http"])
    }

    @Test("forwarding fields spelled with underscores are dropped too: CGI backends read them as the same field")
    func underscoreSpellings() {
        let client = HTTPHeaders([
            ("X_Forwarded_Host", "evil.example"), ("x_forwarded-for", "10.9.9.9"), ("X_Real_IP", "10.9.9.9"),
            ("X_Custom", "kept"),
        ])
        let fill = builder.fields(from: client, platform: "WEB", clientAddress: "192.0.2.7", purpose: .cacheFill)
            .headers
        #expect(
            forwardingFields(fill) == [
                ["X-Forwarded-For", "192.0.2.7"], ["X-Forwarded-Proto", "http"],
                ["Forwarded", "for=192.0.2.7;proto=http"],
            ]
        )
        #expect(!fill.contains(name: "X_Forwarded_Host"))
        #expect(!fill.contains(name: "X_Real_IP"))
        #expect(fill["X_Custom"] == ["kept"])
    }
}

extension UpstreamRequestBuilderTests {
    @Test("built fields may carry an X-Request-Id only when the client sent one, or the configuration sets one")
    func mayCarryRequestID() {
        #expect(!builder.mayCarryRequestID(noted: []))
        #expect(!builder.mayCarryRequestID(noted: [.connection, .acceptEncoding]))
        #expect(builder.mayCarryRequestID(noted: .requestID))
        #expect(builder.mayCarryRequestID(noted: nil), "fields nobody noted may hold anything")
        let configured = UpstreamRequestBuilder(
            platformHeader: "beagle-platform",
            configuredHeaders: [("x-REQUEST-id", "fixed")]
        )
        #expect(configured.mayCarryRequestID(noted: []))
        // What the check stands for: whenever built fields hold an X-Request-Id, it says they may.
        let clients = [
            HTTPHeaders([("Host", "h"), ("Accept", "*/*")]),
            HTTPHeaders([("Host", "h"), ("X-Request-Id", "r1")]),
            HTTPHeaders([("x-request-id", "r1"), ("X-REQUEST-ID", "r2")]),
        ]
        var carrying = 0
        for builder in [builder, configured] {
            for client in clients {
                for purpose in [UpstreamRequestBuilder.Purpose.passThrough, .cacheFill] {
                    let noted = RequestFieldPresence(client)
                    let fields = builder.fields(
                        from: client,
                        noted: noted,
                        platform: "IOS",
                        clientAddress: "127.0.0.1",
                        purpose: purpose
                    )
                    if fields.contains(name: "x-request-id") {
                        carrying += 1
                        #expect(builder.mayCarryRequestID(noted: noted), "\(client) \(purpose)")
                    }
                }
            }
        }
        // The configured id on every request, and the client's on the four others.
        #expect(carrying == 10)
    }
}
