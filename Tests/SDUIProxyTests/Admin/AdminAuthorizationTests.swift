import Foundation
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

private func headers(_ pairs: (String, String)...) -> HTTPHeaders {
    HTTPHeaders(pairs.map { ($0.0, $0.1) })
}

@Suite("Admin authorization: bearer token and safe binding")
struct AdminAuthorizationTests {
    let authorization = AdminAuthorization(token: "s3cret-token")

    @Test("a browser's Basic credentials carry the token as the password, whatever the user name")
    func basicCredentials() {
        func basic(_ text: String) -> HTTPHeaders {
            headers(("Authorization", "Basic " + Data(text.utf8).base64EncodedString()))
        }
        #expect(authorization.isAuthorized(basic("admin:s3cret-token"), path: "/"))
        #expect(authorization.isAuthorized(basic(":s3cret-token"), path: "/metrics"))
        #expect(
            authorization.isAuthorized(
                headers(("Authorization", "basic " + Data("x:s3cret-token".utf8).base64EncodedString())),
                path: "/"
            )
        )
        #expect(!authorization.isAuthorized(basic("admin:wrong"), path: "/"))
        #expect(!authorization.isAuthorized(basic("s3cret-token"), path: "/"), "no colon: no password")
        #expect(!authorization.isAuthorized(basic("s3cret-token:"), path: "/"), "the token as the user name")
        #expect(!authorization.isAuthorized(headers(("Authorization", "Basic not-base64!")), path: "/"))
    }

    @Test("the status page's refusal asks a browser for Basic credentials; every other path's for a bearer token")
    func challenges() {
        let page = AdminAuthorization.unauthorizedResponse(for: "/")
        #expect(page.status == .unauthorized)
        #expect(page.headers.contains { $0.name == "WWW-Authenticate" && $0.value.hasPrefix("Basic realm=") })
        let other = AdminAuthorization.unauthorizedResponse(for: "/metrics")
        #expect(other.headers.contains { $0.name == "WWW-Authenticate" && $0.value.hasPrefix("Bearer realm=") })
    }

    @Test("/health is always allowed, with or without a query, and without credentials")
    func healthIsPublic() {
        #expect(authorization.isAuthorized(HTTPHeaders(), path: "/health"))
        #expect(authorization.isAuthorized(HTTPHeaders(), path: "/health?verbose=1"))
        #expect(authorization.isAuthorized(headers(("Authorization", "Bearer wrong")), path: "/health"))
        #expect(!authorization.isAuthorized(HTTPHeaders(), path: "/healthz"))
    }

    @Test("/ready is open like /health by default; with the probes closed both need the token")
    func probes() {
        #expect(authorization.isAuthorized(HTTPHeaders(), path: "/ready"))
        #expect(authorization.openingProbes(true).isAuthorized(HTTPHeaders(), path: "/ready?x=1"))
        let closed = authorization.openingProbes(false)
        for path in ["/health", "/ready"] {
            #expect(!closed.isAuthorized(HTTPHeaders(), path: path))
            #expect(closed.isAuthorized(headers(("Authorization", "Bearer s3cret-token")), path: path))
        }
        // Without a token there is nothing to close them with.
        #expect(AdminAuthorization(token: nil).openingProbes(false).isAuthorized(HTTPHeaders(), path: "/ready"))
    }

    @Test("other paths need the exact bearer token")
    func tokenRequired() {
        #expect(authorization.isAuthorized(headers(("Authorization", "Bearer s3cret-token")), path: "/prefetch"))
        #expect(authorization.isAuthorized(headers(("authorization", "bearer s3cret-token")), path: "/metrics"))
        #expect(authorization.isAuthorized(headers(("Authorization", "BEARER  s3cret-token ")), path: "/metrics"))
        #expect(!authorization.isAuthorized(HTTPHeaders(), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "Bearer s3cret-tokeN")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "Bearer s3cret-token2")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "Bearer s3cret")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "Bearer ")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "Basic s3cret-token")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "s3cret-token")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("Authorization", "Bearers3cret-token")), path: "/metrics"))
        #expect(!authorization.isAuthorized(headers(("X-Token", "s3cret-token")), path: "/metrics"))
    }

    @Test("a refused request gets 401 with the JSON error model")
    func unauthorizedResponse() {
        let response = AdminAuthorization.unauthorizedResponse
        #expect(response.status == .unauthorized)
        #expect(response.contentType == "application/json")
        #expect(response.json.hasPrefix(#"{"error":{"kind":"unauthorized","message":"#))
        #expect(response.json.hasSuffix(#","retryable":false}}"#))
        // RFC 9110 section 11.6.1: a 401 names the scheme it wants.
        #expect(response.headers.map(\.name) == ["WWW-Authenticate"])
        #expect(response.headers.first?.value == #"Bearer realm="sdui-proxy""#)
    }

    @Test("two Authorization headers are refused even if one holds the token")
    func duplicateHeaders() {
        let twice = headers(("Authorization", "Bearer s3cret-token"), ("Authorization", "Bearer other"))
        #expect(!authorization.isAuthorized(twice, path: "/prefetch"))
    }

    @Test("without a token every path is allowed: the listener is loopback-only then")
    func noToken() throws {
        for open in [AdminAuthorization(token: nil), AdminAuthorization(environment: [:])] {
            #expect(!open.requiresToken)
            #expect(open.isAuthorized(HTTPHeaders(), path: "/prefetch"))
            try open.checkBinding(host: "127.0.0.1")
        }
        let fromEnvironment = AdminAuthorization(environment: ["SDUI_PROXY_ADMIN_TOKEN": "abc"])
        #expect(fromEnvironment.requiresToken)
        #expect(!fromEnvironment.isAuthorized(HTTPHeaders(), path: "/prefetch"))
        #expect(fromEnvironment.isAuthorized(headers(("Authorization", "Bearer abc")), path: "/prefetch"))
    }

    @Test("a token set but empty or blank refuses to start, names the variable, and lets no request through")
    func emptyToken() {
        for value in ["", " ", "\t \r\n", "\n"] {
            for empty in [
                AdminAuthorization(token: value), AdminAuthorization(environment: ["SDUI_PROXY_ADMIN_TOKEN": value]),
            ] {
                for host in ["127.0.0.1", "0.0.0.0"] {
                    let error = #expect(throws: ConfigurationError.self) { try empty.checkBinding(host: host) }
                    #expect(error?.key == "SDUI_PROXY_ADMIN_TOKEN")
                    #expect(error?.problem.contains("is set but empty") == true)
                    #expect(error?.description.contains("SDUI_PROXY_ADMIN_TOKEN") == true)
                }
                // Were it used all the same, it would lock the endpoints, not open them.
                #expect(empty.requiresToken)
                #expect(!empty.isAuthorized(HTTPHeaders(), path: "/prefetch"))
                #expect(!empty.isAuthorized(headers(("Authorization", "Bearer ")), path: "/prefetch"))
                #expect(empty.isAuthorized(HTTPHeaders(), path: "/health"))
            }
        }
    }

    @Test("the constant-time comparison agrees with == for equal, different and differently sized input")
    func constantTimeEquals() {
        let expected = Array("abcdef".utf8)
        let cases: [(String, Bool)] = [
            ("abcdef", true), ("abcdeg", false), ("bbcdef", false), ("abcde", false), ("abcdefg", false),
            ("", false), ("ABCDEF", false),
        ]
        for (presented, equal) in cases {
            #expect(AdminAuthorization.constantTimeEquals(expected, Array(presented.utf8)[...]) == equal)
        }
        // A slice that does not start at index 0.
        let padded = Array("xxabcdef".utf8)
        #expect(AdminAuthorization.constantTimeEquals(expected, padded[2...]))
        // Bytes that would be equal if the past-the-end filler were zero are still unequal.
        #expect(!AdminAuthorization.constantTimeEquals([0, 0], [0][...]))
    }

    @Test("loopback hosts are recognised and others are not")
    func loopbackHosts() {
        for host in [
            "127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]", "0:0:0:0:0:0:0:1", "localhost",
            "LOCALHOST", "localhost.", "::ffff:127.0.0.1",
        ] {
            #expect(AdminAuthorization.isLoopback(host), "\(host)")
        }
        for host in [
            "0.0.0.0", "::", "[::]", "10.0.0.1", "192.168.1.1", "128.0.0.1", "1.127.0.0", "proxy", "",
            "127.0.0.1.example.com", "localhost.example.com", "::2", "::ffff:10.0.0.1", "127.0.0.256",
        ] {
            #expect(!AdminAuthorization.isLoopback(host), "\(host)")
        }
    }

    @Test("a non-loopback admin bind needs a token, and the error says which key and what to do")
    func bindingCheck() throws {
        try AdminAuthorization.checkBinding(host: "127.0.0.1", token: nil)
        try AdminAuthorization.checkBinding(host: "::1", token: "")
        try AdminAuthorization.checkBinding(host: "0.0.0.0", token: "s3cret")

        let error = #expect(throws: ConfigurationError.self) {
            try AdminAuthorization.checkBinding(host: "0.0.0.0", token: nil)
        }
        #expect(error?.key == "admin.host")
        #expect(error?.problem.contains("SDUI_PROXY_ADMIN_TOKEN") == true)
        #expect(error?.problem.contains("0.0.0.0") == true)
        #expect(throws: ConfigurationError.self) { try AdminAuthorization.checkBinding(host: "10.1.2.3", token: "") }
    }

    @Test("a token read with a trailing newline is the token; one no client could send is refused at start")
    func tokenShape() throws {
        let fromFile = AdminAuthorization(token: "s3cret-token\n")
        #expect(fromFile.isAuthorized(headers(("Authorization", "Bearer s3cret-token")), path: "/metrics"))
        try fromFile.checkBinding(host: "0.0.0.0")
        for unusable in ["two,parts", "inner space", "quote\"d", "=only"] {
            #expect(throws: ConfigurationError.self, "\(unusable)") {
                try AdminAuthorization(token: unusable).checkBinding(host: "127.0.0.1")
            }
        }
        try AdminAuthorization(token: "abc+/_~.-XYZ09==").checkBinding(host: "0.0.0.0")
    }
}
