import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A certificate authority made for one test, and a server certificate it signed for `localhost` and 127.0.0.1:
/// what an `https://` origin on loopback presents, and what the proxy is told to trust (`upstream.caFile`).
/// Nothing is read from outside the test; the CA's certificate is written to a temporary file for the proxy.
struct TestCertificates {
    let authorityPEM: String
    let serverContext: NIOSSLContext
    /// The server's certificate and key as PEM, for a listener that reads them from files (`listen.tls`).
    let serverCertificatePEM: String
    let serverKeyPEM: String

    init(names: [String] = ["localhost"], addresses: [[UInt8]] = [[127, 0, 0, 1]]) throws {
        let now = Date()
        let authorityKey = P256.Signing.PrivateKey()
        let authorityName = try DistinguishedName { CommonName("sdui-proxy test authority") }
        let authority = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(authorityKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 86_400,
            issuer: authorityName,
            subject: authorityName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                KeyUsage(keyCertSign: true)
            },
            issuerPrivateKey: Certificate.PrivateKey(authorityKey)
        )
        let serverKey = P256.Signing.PrivateKey()
        var alternativeNames = names.map { GeneralName.dnsName($0) }
        alternativeNames += addresses.map { GeneralName.ipAddress(ASN1OctetString(contentBytes: $0[...])) }
        let server = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(serverKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 86_400,
            issuer: authorityName,
            subject: try DistinguishedName { CommonName(names.first ?? "server") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames(alternativeNames)
                try ExtendedKeyUsage([.serverAuth])
            },
            issuerPrivateKey: Certificate.PrivateKey(authorityKey)
        )
        authorityPEM = try authority.serializeAsPEM().pemString
        serverCertificatePEM = try server.serializeAsPEM().pemString
        serverKeyPEM = serverKey.pemRepresentation
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [
                .certificate(try NIOSSLCertificate(bytes: Array(serverCertificatePEM.utf8), format: .pem))
            ],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(serverKeyPEM.utf8), format: .pem))
        )
        configuration.minimumTLSVersion = .tlsv12
        serverContext = try NIOSSLContext(configuration: configuration)
    }

    /// A client's TLS configuration that trusts the authority only.
    var clientConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(
            (try? NIOSSLCertificate.fromPEMBytes(Array(authorityPEM.utf8))) ?? []
        )
        return configuration
    }

    /// Writes the server's certificate and key to `certificate` and `key`, replacing what is there (a rotation).
    func writeServerPair(certificate: String, key: String) throws {
        try serverCertificatePEM.write(toFile: certificate, atomically: true, encoding: .utf8)
        try serverKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)
    }

    /// Writes the authority's certificate to a new temporary file, for `upstream.caFile`; the caller removes it.
    func writeAuthority() throws -> String {
        let path = NSTemporaryDirectory() + "sdui-proxy-test-ca-\(UUID().uuidString).pem"
        try authorityPEM.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
