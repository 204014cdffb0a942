import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The public listener over TLS, against a real origin, with async-http-client as the app: HTTP/2 when ALPN
/// agrees on it, HTTP/1.1 when the client offers only that, and a plain-HTTP request on the TLS port refused
/// in words it can read. The certificate is made by the test and read from files, as `listen.tls` names them.
@Suite("TLS and HTTP/2 on the public listener")
struct PublicTLSTests {
    /// A proxy whose public listener speaks TLS with `certificates`' server pair, written to files in a new
    /// directory, and a client that trusts their authority and speaks `version`.
    struct TLSProxy {
        let harness: ProxyHarness
        let client: HTTPClient
        /// The pair the listener started with, and the authority that signed it.
        let certificates: TestCertificates
        let directory: String
        var certificateFile: String { directory + "/cert.pem" }
        var keyFile: String { directory + "/key.pem" }
        var baseURL: String { "https://localhost:\(harness.server.publicPort)" }

        func get(
            _ path: String,
            method: HTTPMethod = .GET,
            headers: [(String, String)] = [],
            body: String? = nil
        ) async throws -> (reply: ProxyHarness.Reply, version: HTTPVersion) {
            var request = HTTPClientRequest(url: baseURL + path)
            request.method = method
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            if let body { request.body = .bytes(ByteBuffer(string: body)) }
            let response = try await client.execute(request, timeout: .seconds(10))
            let bytes = try await response.body.collect(upTo: 16 << 20)
            return (
                ProxyHarness.Reply(status: response.status, headers: response.headers, body: String(buffer: bytes)),
                response.version
            )
        }
    }

    static func run(
        http1Only: Bool = false,
        origin: @escaping TestOrigin.Responder = { _ in .component() },
        configure: ((inout ProxyConfiguration) -> Void)? = nil,
        _ body: (TLSProxy) async throws -> Void
    ) async throws {
        let certificates = try TestCertificates()
        let directory = NSTemporaryDirectory() + "sdui-proxy-listener-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try certificates.writeServerPair(certificate: directory + "/cert.pem", key: directory + "/key.pem")
        var clientConfiguration = HTTPClient.Configuration(
            tlsConfiguration: certificates.clientConfiguration,
            redirectConfiguration: .disallow
        )
        clientConfiguration.httpVersion = http1Only ? .http1Only : .automatic
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        do {
            try await ProxyHarness.run(
                origin: origin,
                configure: { configuration in
                    configuration.listenProtocols.tls = .init(
                        certificate: directory + "/cert.pem",
                        privateKey: directory + "/key.pem"
                    )
                    configure?(&configuration)
                }
            ) { harness in
                try await body(
                    TLSProxy(harness: harness, client: client, certificates: certificates, directory: directory)
                )
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    @Test("HTTP/2 by ALPN: a miss then hits on one connection, with the cache's fields; the backend hears 2 and https")
    func http2MissThenHit() async throws {
        try await Self.run { proxy in
            let (miss, version) = try await proxy.get("/screens/home")
            #expect(version == .http2)
            #expect(miss.status == .ok)
            #expect(miss["X-Cache"] == "MISS")
            #expect(miss.body.contains("_beagleComponent_"))
            for _ in 0..<3 {
                let (hit, _) = try await proxy.get("/screens/home")
                #expect(hit["X-Cache"] == "HIT")
                #expect(hit["Cache-Status"]?.hasPrefix("sdui-proxy; hit") == true)
                #expect(hit["Accept-Ranges"] == "bytes")
                #expect(hit["Age"] != nil)
                #expect(hit.body == miss.body)
            }
            let fill = try #require(proxy.harness.origin.requests.first)
            #expect(proxy.harness.origin.requests.count == 1)
            #expect(fill.headers.first(name: "via") == "2 sdui-proxy")
            #expect(fill.headers.first(name: "x-forwarded-proto") == "https")
            #expect(fill.headers.first(name: "forwarded")?.hasSuffix(";proto=https") == true)
            let part = try await proxy.get("/screens/home", headers: [("Range", "bytes=0-4")])
            #expect(part.reply.status == .partialContent)
            #expect(part.reply.body == String(miss.body.prefix(5)))
            #expect(part.reply["Content-Range"]?.hasPrefix("bytes 0-4/") == true)
            let etag = try #require(miss["ETag"])
            let notModified = try await proxy.get("/screens/home", headers: [("If-None-Match", etag)])
            #expect(notModified.reply.status == .notModified)
            #expect(notModified.reply.body.isEmpty)
            #expect(notModified.reply["Accept-Ranges"] == nil)
        }
    }

    @Test("HTTP/1.1 by ALPN is served as over clear text, and told to the backend as https")
    func http1OverTLS() async throws {
        try await Self.run(http1Only: true) { proxy in
            let (reply, version) = try await proxy.get("/screens/a")
            #expect(version == .http1_1)
            #expect(reply.status == .ok)
            #expect(try await proxy.get("/screens/a").reply["X-Cache"] == "HIT")
            let fill = try #require(proxy.harness.origin.requests.first)
            #expect(fill.headers.first(name: "via") == "1.1 sdui-proxy")
            #expect(fill.headers.first(name: "x-forwarded-proto") == "https")
        }
    }

    @Test("a write over HTTP/2: its body reaches the backend whole, and the backend's answer comes back")
    func http2Forward() async throws {
        let origin: TestOrigin.Responder = { request in
            request.method == .GET
                ? .component()
                : TestOrigin.Response(status: .created, headers: [("Content-Type", "text/plain")], body: "made")
        }
        try await Self.run(origin: origin) { proxy in
            let body = String(repeating: "0123456789", count: 10_000)
            let (reply, version) = try await proxy.get("/api/orders", method: .POST, body: body)
            #expect(version == .http2)
            #expect(reply.status == .created)
            #expect(reply.body == "made")
            let forwarded = try #require(proxy.harness.origin.requests.last)
            #expect(forwarded.method == .POST)
            #expect(String(buffer: forwarded.body) == body)
            #expect(forwarded.headers.first(name: "via") == "2 sdui-proxy")
        }
    }

    @Test("a body past limits.maxBodyBytes on a stream is refused with 413, and the connection serves on")
    func http2BodyTooLarge() async throws {
        try await Self.run(configure: { $0.limits.maxBodyBytes = 1000 }) { proxy in
            let (refused, _) = try await proxy.get(
                "/api/orders",
                method: .POST,
                body: String(repeating: "x", count: 5000)
            )
            #expect(refused.status == .payloadTooLarge)
            #expect(refused.body.contains("limits.maxBodyBytes"))
            #expect(proxy.harness.origin.requests.isEmpty, "the backend never saw it")
            #expect(try await proxy.get("/screens/a").reply.status == .ok)
        }
    }

    @Test("a plain HTTP request on the TLS port gets a 400 it can read, and the connection closes")
    func plainHTTPOnTheTLSPort() async throws {
        try await Self.run { proxy in
            let connection = try await RawConnection(port: proxy.harness.server.publicPort)
            try await connection.send("GET /screens/home HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let answer = try await connection.readUntilClosed()
            #expect(answer.hasPrefix("HTTP/1.1 400 Bad Request\r\n"))
            #expect(answer.contains("Connection: close"))
            #expect(answer.contains(#""message":"this port speaks TLS: use https://""#))
            #expect(proxy.harness.origin.requests.isEmpty)
        }
    }
}
