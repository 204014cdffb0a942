import Logging
import NIOCertificateReloading
import NIOCore
import NIOSSL
import SDUIProxyCore
import ServiceLifecycle

/// The public listener's TLS (`listen.tls`): one server context whose certificate and key come from a
/// ``TimedCertificateReloader``. Each handshake takes the pair the reloader holds, so a rotated pair (a renewed
/// certificate, a Kubernetes secret updated in place) is served from the next handshake on, and open connections
/// keep theirs. The reloader re-reads the files every ``refreshInterval`` and on ``reload()`` (SIGHUP); a pair
/// that does not load (unreadable, not PEM, a key that is not the certificate's) is logged and the last good one
/// stays.
///
/// ALPN offers `h2` and `http/1.1` (only `http/1.1` when `listen.http2` is off); the cipher suites are
/// swift-nio-ssl's defaults: forward-secret AEAD suites only.
final class ListenerTLS: Sendable {
    /// How often the files are read again when nothing asks: a rotation is served within this long.
    static let refreshInterval: Duration = .seconds(60)

    let context: NIOSSLContext
    private let reloader: TimedCertificateReloader
    private let tls: ListenerProtocols.TLS
    private let logger: Logger

    /// Loads the pair once, and fails as ``check(_:)`` does when it cannot serve.
    init(
        _ tls: ListenerProtocols.TLS,
        http2: Bool,
        refreshInterval: Duration = ListenerTLS.refreshInterval,
        logger: Logger
    )
        throws
    {
        self.tls = tls
        self.logger = logger
        let configuration = TimedCertificateReloader.Configuration(
            refreshInterval: refreshInterval,
            certificateSource: .init(location: .file(path: tls.certificate), format: .pem),
            privateKeySource: .init(location: .file(path: tls.privateKey), format: .pem)
        ) { configuration in
            configuration.onCertificateLoadFailed = { [logger, tls] failure in
                logger.error(
                    "listen.tls: the certificate and key were not reloaded; the last good pair is still served",
                    metadata: [
                        "certificate": "\(tls.certificate)", "privateKey": "\(tls.privateKey)",
                        "error": "\(Self.describe(failure.error))",
                    ]
                )
            }
        }
        do {
            reloader = try TimedCertificateReloader.makeReloaderValidatingSources(configuration: configuration)
        } catch {
            throw Self.configurationError(error, tls)
        }
        var server = try TLSConfiguration.makeServerConfiguration(certificateReloader: reloader)
        server.minimumTLSVersion = tls.minimumVersion == .v1_3 ? .tlsv13 : .tlsv12
        server.applicationProtocols = http2 ? ["h2", "http/1.1"] : ["http/1.1"]
        context = try NIOSSLContext(configuration: server)
    }

    /// A handler for one connection's TLS.
    func makeHandler() -> NIOSSLServerHandler {
        NIOSSLServerHandler(context: context)
    }

    /// Reads the files again now (SIGHUP); a pair that fails leaves the last good one in force, and is logged.
    func reload() {
        do {
            try reloader.reload()
            logger.info("listen.tls: certificate and key read again", metadata: ["certificate": "\(tls.certificate)"])
        } catch {
            // Logged by the reloader's failure callback.
        }
    }

    /// The service that re-reads the files on a timer, for the proxy's service group.
    var service: any Service { reloader }

    /// Refuses a pair that cannot serve: unreadable files, no certificate, a key that is not the certificate's.
    /// What `--check-config` and start-up run.
    static func check(_ tls: ListenerProtocols.TLS) throws(ConfigurationError) {
        do {
            _ = try TimedCertificateReloader.makeReloaderValidatingSources(
                refreshInterval: refreshInterval,
                certificateSource: .init(location: .file(path: tls.certificate), format: .pem),
                privateKeySource: .init(location: .file(path: tls.privateKey), format: .pem)
            )
        } catch {
            throw configurationError(error, tls)
        }
    }

    private static func configurationError(_ error: any Error, _ tls: ListenerProtocols.TLS) -> ConfigurationError {
        guard let failure = error as? TimedCertificateReloader.Error else {
            return ConfigurationError(key: "listen.tls", problem: "cannot serve this pair: \(describe(error))")
        }
        if failure == .certificatePathNotFound(tls.certificate) {
            return ConfigurationError(key: "listen.tls.certificate", problem: "cannot read \(tls.certificate)")
        }
        if failure == .privateKeyPathNotFound(tls.privateKey) {
            return ConfigurationError(key: "listen.tls.privateKey", problem: "cannot read \(tls.privateKey)")
        }
        if failure == .publicKeyMismatch {
            return ConfigurationError(
                key: "listen.tls.privateKey",
                problem: "is not the private key of the certificate in \(tls.certificate)"
            )
        }
        return ConfigurationError(key: "listen.tls", problem: "cannot serve this pair: \(describe(failure))")
    }

    /// An error on one line: the reloader's descriptions span several.
    private static func describe(_ error: any Error) -> String {
        "\(error)".split(whereSeparator: \.isNewline).map { $0.drop(while: \.isWhitespace) }.joined(separator: " ")
    }
}
