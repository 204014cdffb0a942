import Foundation
import NIOCore
import NIOSSL
import SDUIProxyCore

/// How the connections to an `https://` backend are wrapped: one TLS context for the client, trusting the
/// system's roots or `upstream.caFile`'s certificates, and the name each handshake sends and checks.
///
/// The backend's certificate must chain to a trusted root and name the backend: its host name, or for an
/// IP address, that address (sent in no SNI, as TLS forbids, and checked against the certificate's IP entries).
struct UpstreamTLS: Sendable {
    let context: NIOSSLContext
    /// The name sent in SNI and checked against the certificate; nil for an IP address.
    let serverHostname: String?
    /// The bytes of `upstream.caFile` as read, when one is set: a reload makes the client again only when they
    /// changed.
    let authorityFile: [UInt8]?

    init(host: String, caFile: String?) throws(ConfigurationError) {
        var configuration = TLSConfiguration.makeClientConfiguration()
        // A connection the proxy closes counts against upstream.maxConnections until it is closed: the backend's
        // own close_notify is not waited for long (5 s by default), least of all from a backend too slow to answer.
        configuration.shutdownTimeout = .milliseconds(250)
        authorityFile = try caFile.map { path throws(ConfigurationError) in try Self.read(path) }
        if let authorityFile, let caFile {
            configuration.trustRoots = .certificates(try Self.certificates(in: authorityFile, from: caFile))
        }
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw ConfigurationError(key: "upstream.url", problem: "cannot set up TLS for the backend (\(error))")
        }
        // A name is sent without its root's trailing dot (RFC 6066 section 3).
        let name = host.hasSuffix(".") ? String(host.dropLast()) : host
        serverHostname = (try? SocketAddress(ipAddress: name, port: 0)) == nil ? name : nil
    }

    /// The bytes of the file at `path`, or why it cannot be read.
    static func read(_ path: String) throws(ConfigurationError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(key: "upstream.caFile", problem: "cannot read \(path)")
        }
        return Array(data)
    }

    /// The certificates of a PEM file, or why it gives none.
    static func certificates(in path: String) throws(ConfigurationError) -> [NIOSSLCertificate] {
        try certificates(in: read(path), from: path)
    }

    /// The certificates in `bytes`, read from `path`, or why they are none.
    static func certificates(in bytes: [UInt8], from path: String) throws(ConfigurationError) -> [NIOSSLCertificate] {
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMBytes(bytes)
        } catch {
            throw ConfigurationError(key: "upstream.caFile", problem: "\(path) is not a PEM file of certificates")
        }
        guard !certificates.isEmpty else {
            throw ConfigurationError(key: "upstream.caFile", problem: "\(path) holds no certificate")
        }
        return certificates
    }

    /// The handler that makes one connection a TLS one; first in its pipeline.
    func makeHandler() throws -> NIOSSLClientHandler {
        try NIOSSLClientHandler(context: context, serverHostname: serverHostname)
    }
}
