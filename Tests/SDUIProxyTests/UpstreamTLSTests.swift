import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// An `https://` backend over loopback, its certificate signed by an authority made for the test: the same data
/// plane as over plain HTTP (pooled connections, fills, pass-through, interim responses), and a certificate that
/// is not trusted, or not for the backend's name, refused with a 502 that says which.
@Suite("An HTTPS backend")
struct UpstreamTLSTests {
    /// Runs `body` with a file holding `certificates`' authority, removed afterwards.
    static func withAuthorityFile(
        of certificates: TestCertificates,
        _ body: (String) async throws -> Void
    ) async throws {
        let path = try certificates.writeAuthority()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await body(path)
    }

    @Test("fills, hits and pass-through over TLS on kept-alive connections, trusting upstream.caFile")
    func dataPlane() async throws {
        let certificates = try TestCertificates()
        try await Self.withAuthorityFile(of: certificates) { caFile in
            let origin: TestOrigin.Responder = { request in
                request.method == .GET ? .component() : TestOrigin.Response(status: .created, headers: [], body: "")
            }
            try await ProxyHarness.run(
                origin: origin,
                originTLS: certificates.serverContext,
                configure: { $0.upstream.caFile = caFile }
            ) { proxy in
                #expect(proxy.origin.url.hasPrefix("https://localhost:"))
                let miss = try await proxy.get("/screens/secure")
                #expect(miss.status == .ok)
                #expect(miss["X-Cache"] == "MISS")
                #expect(try await proxy.get("/screens/secure")["X-Cache"] == "HIT")
                let posted = try await proxy.get("/screens/form", method: .POST, body: "name=value")
                #expect(posted.status == .created)
                #expect(String(buffer: try #require(proxy.origin.requests.last).body) == "name=value")
                #expect(proxy.origin.requests.first?.headers.first(name: "host") == "localhost:\(proxy.origin.port)")
                #expect(proxy.origin.acceptedConnections == 1, "one TLS connection carried them all")
            }
        }
    }

    @Test("RFC 9110 §15.2: a TLS backend's 1xx reach the client, on a fill and on a forwarded request")
    func interimResponses() async throws {
        let certificates = try TestCertificates()
        let component = #"{"_beagleComponent_":"hinted"}"#
        let hinting: RawOrigin.Answer = { _ in
            (
                "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"
                    + "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=60\r\n"
                    + "Content-Length: \(component.utf8.count)\r\n\r\n\(component)",
                false
            )
        }
        try await Self.withAuthorityFile(of: certificates) { caFile in
            let configure: @Sendable (inout ProxyConfiguration) -> Void = { $0.upstream.caFile = caFile }
            try await ProxyHarness.run(behind: hinting, tls: certificates.serverContext, configure: configure) {
                proxy,
                _ async throws in
                let connection = try await RawConnection(port: proxy.server.publicPort)
                for request in [
                    "GET /screens/hinted HTTP/1.1\r\nHost: x\r\n\r\n",
                    "POST /screens/form HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
                ] {
                    try await connection.send(request)
                    let hints = try #require(try await connection.readResponse(bodyless: true))
                    #expect(hints.head == "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload", "\(request)")
                    let final = try #require(try await connection.readResponse())
                    #expect(final.head.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(request)")
                    #expect(final.body == component)
                }
                await connection.close()
            }
        }
    }

    @Test("the backend's address as the URL's host: no SNI, the certificate checked against the address")
    func addressHost() async throws {
        let certificates = try TestCertificates()
        try await Self.withAuthorityFile(of: certificates) { caFile in
            try await ProxyHarness.run(
                originTLS: certificates.serverContext,
                configure: { configuration in
                    configuration.upstream.url = configuration.upstream.url.replacingOccurrences(
                        of: "https://localhost:",
                        with: "https://127.0.0.1:"
                    )
                    configuration.upstream.caFile = caFile
                }
            ) { proxy async throws in
                #expect(try await proxy.get("/screens/by-address").status == .ok)
            }
        }
    }

    @Test("a certificate from an authority not trusted, or for another name, is a 502 that says which")
    func refusedCertificates() async throws {
        // Trusted by the system's roots: not this test's authority.
        let certificates = try TestCertificates()
        try await ProxyHarness.run(originTLS: certificates.serverContext) { proxy in
            let reply = try await proxy.get("/screens/untrusted")
            #expect(reply.status == .badGateway)
            #expect(reply.body.contains("the backend's certificate is not trusted"), "\(reply.body)")
            #expect(proxy.origin.requestCount == 0)
        }
        // Trusted, but for another name than the one the proxy connects to.
        let elsewhere = try TestCertificates(names: ["backend.example"], addresses: [])
        try await Self.withAuthorityFile(of: elsewhere) { caFile in
            try await ProxyHarness.run(
                originTLS: elsewhere.serverContext,
                configure: { $0.upstream.caFile = caFile }
            ) { proxy in
                let reply = try await proxy.get("/screens/misnamed")
                #expect(reply.status == .badGateway)
                #expect(reply.body.contains("the backend's certificate is for another name"), "\(reply.body)")
                #expect(proxy.origin.requestCount == 0)
            }
        }
    }

    @Test("a reload reads upstream.caFile again: a rotated authority is trusted without a restart")
    func rotatedAuthority() async throws {
        let old = try TestCertificates()
        let current = try TestCertificates()
        try await Self.withAuthorityFile(of: old) { caFile in
            try await ProxyHarness.run(
                originTLS: current.serverContext,
                configure: { $0.upstream.caFile = caFile }
            ) { proxy in
                #expect(try await proxy.get("/screens/before").status == .badGateway)
                // The same file: the client, and its connections, are kept.
                let client = ObjectIdentifier(proxy.server.context.client as AnyObject)
                try await proxy.server.reload(proxy.server.context.configuration)
                #expect(ObjectIdentifier(proxy.server.context.client as AnyObject) == client)
                try current.authorityPEM.write(toFile: caFile, atomically: true, encoding: .utf8)
                try await proxy.server.reload(proxy.server.context.configuration)
                #expect(try await proxy.get("/screens/after").status == .ok)
            }
        }
    }
}
