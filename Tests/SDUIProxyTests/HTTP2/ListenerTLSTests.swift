import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The listener's certificate and key: checked before start (`--check-config` runs the same checks), and
/// rotated in place without dropping a connection, a broken pair refused while the last good one stays.
@Suite("The public listener's certificate and key")
struct ListenerTLSTests {
    private static func directory() throws -> String {
        let path = NSTemporaryDirectory() + "sdui-listener-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    private func refusal(_ tls: ListenerProtocols.TLS) -> ConfigurationError? {
        var configuration = ProxyConfiguration()
        configuration.listenProtocols.tls = tls
        do {
            try StartupChecks.check(configuration, adminAuthorization: AdminAuthorization(token: nil))
            return nil
        } catch {
            return error
        }
    }

    @Test("start-up refuses a missing file, a file with no certificate, and a key that is not the certificate's")
    func startupChecks() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let mine = try TestCertificates()
        let other = try TestCertificates()
        let certificate = directory + "/cert.pem"
        let key = directory + "/key.pem"
        try mine.writeServerPair(certificate: certificate, key: key)
        #expect(refusal(.init(certificate: certificate, privateKey: key)) == nil, "a matching pair serves")

        let missing = try #require(refusal(.init(certificate: directory + "/none.pem", privateKey: key)))
        #expect(missing.key == "listen.tls.certificate")
        #expect(missing.problem.contains("cannot read"))
        #expect(missing.problem.contains("none.pem"))

        let otherKey = directory + "/other-key.pem"
        try other.serverKeyPEM.write(toFile: otherKey, atomically: true, encoding: .utf8)
        let mismatch = try #require(refusal(.init(certificate: certificate, privateKey: otherKey)))
        #expect(mismatch.key == "listen.tls.privateKey")
        #expect(mismatch.problem.contains("is not the private key of the certificate"))
        // The refusal names the files; the key read from one is in none of what it says.
        let keyBody = other.serverKeyPEM.split(separator: "\n").dropFirst().first.map(String.init) ?? other.serverKeyPEM
        #expect(!mismatch.description.contains(keyBody), "never the key")

        let notPEM = directory + "/not.pem"
        try "not a certificate".write(toFile: notPEM, atomically: true, encoding: .utf8)
        let garbage = try #require(refusal(.init(certificate: notPEM, privateKey: key)))
        #expect(garbage.key.hasPrefix("listen.tls"))
        #expect(!garbage.problem.contains("\n"), "one line for the log")
    }

    @Test("a pair rotated in place is served from the next handshake on; open connections keep theirs")
    func rotation() async throws {
        let next = try TestCertificates()
        let broken = try TestCertificates()
        try await PublicTLSTests.run { proxy in
            #expect(try await proxy.get("/screens/a").version == .http2)

            // The files change under the running proxy; a reload (SIGHUP) reads them again.
            try next.writeServerPair(certificate: proxy.certificateFile, key: proxy.keyFile)
            try await proxy.harness.server.reload(proxy.harness.server.context.configuration)
            #expect(try await proxy.get("/screens/a").reply["X-Cache"] == "HIT", "the open connection goes on")

            let nextClient = HTTPClient(
                eventLoopGroupProvider: .singleton,
                configuration: .init(tlsConfiguration: next.clientConfiguration)
            )
            let fresh = TLSProxyClient(client: nextClient, baseURL: proxy.baseURL)
            #expect(try await fresh.get("/screens/a") == .ok, "a new handshake gets the new certificate")
            // Without retries, a refused handshake fails the request at once.
            var staleConfiguration = HTTPClient.Configuration(tlsConfiguration: proxy.certificates.clientConfiguration)
            staleConfiguration.connectionPool.retryConnectionEstablishment = false
            let stale = HTTPClient(eventLoopGroupProvider: .singleton, configuration: staleConfiguration)
            await #expect(throws: (any Error).self, "the old certificate is no longer presented") {
                _ = try await TLSProxyClient(client: stale, baseURL: proxy.baseURL).get("/screens/a")
            }

            // A broken pair (a certificate with another's key) is refused; the pair in force stays.
            try next.serverCertificatePEM.write(toFile: proxy.certificateFile, atomically: true, encoding: .utf8)
            try broken.serverKeyPEM.write(toFile: proxy.keyFile, atomically: true, encoding: .utf8)
            try await proxy.harness.server.reload(proxy.harness.server.context.configuration)
            let afterBroken = HTTPClient(
                eventLoopGroupProvider: .singleton,
                configuration: .init(tlsConfiguration: next.clientConfiguration)
            )
            #expect(try await TLSProxyClient(client: afterBroken, baseURL: proxy.baseURL).get("/screens/a") == .ok)
            for client in [nextClient, stale, afterBroken] { try await client.shutdown() }
        }
    }
}

/// A client of the TLS listener with a trust of its own.
private struct TLSProxyClient {
    let client: HTTPClient
    let baseURL: String

    func get(_ path: String) async throws -> HTTPResponseStatus {
        let response = try await client.execute(HTTPClientRequest(url: baseURL + path), timeout: .seconds(10))
        _ = try await response.body.collect(upTo: 1 << 20)
        return response.status
    }
}
