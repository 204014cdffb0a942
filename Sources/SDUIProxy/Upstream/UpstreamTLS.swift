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

    init(host: String, caFile: String?) throws(ConfigurationError) {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let caFile { configuration.trustRoots = .certificates(try Self.certificates(in: caFile)) }
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw ConfigurationError(key: "upstream.url", problem: "cannot set up TLS for the backend (\(error))")
        }
        serverHostname = (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }

    /// The certificates of a PEM file, or why it gives none.
    static func certificates(in path: String) throws(ConfigurationError) -> [NIOSSLCertificate] {
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMFile(path)
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
