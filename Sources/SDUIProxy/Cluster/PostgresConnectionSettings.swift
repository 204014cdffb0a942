import PostgresNIO
import SDUIProxyCore

/// How postgres-nio reaches the database a ``PostgresURL`` names: the settings of a pooled `PostgresClient` and
/// of a single `PostgresConnection` (for a connection of its own, like one that listens for notifications).
///
/// `sslmode=require` encrypts without checking the server's certificate, as libpq means it; `verify-full` checks
/// the certificate against the system's trust roots and the host name; `disable` is plain TCP.
public enum PostgresConnectionSettings {
    /// The configuration of a `PostgresClient` for `url`.
    ///
    /// - Parameters:
    ///   - applicationName: sent as `application_name`, so the server's `pg_stat_activity` tells the replicas apart.
    ///   - connectTimeout: how long one connection attempt may take.
    ///   - maximumConnections: the most connections the client's pool opens.
    public static func clientConfiguration(
        _ url: PostgresURL,
        applicationName: String? = nil,
        connectTimeout: Duration = .seconds(10),
        maximumConnections: Int = 20
    ) -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(
            host: url.host,
            port: url.port,
            username: url.user,
            password: url.password,
            database: url.database,
            tls: clientTLS(url.sslMode)
        )
        configuration.options.connectTimeout = connectTimeout
        configuration.options.maximumConnections = max(1, maximumConnections)
        if let applicationName {
            configuration.options.additionalStartupParameters = [("application_name", applicationName)]
        }
        return configuration
    }

    /// The configuration of a single `PostgresConnection` to `url`.
    ///
    /// - Throws: when the TLS context for `require` or `verify-full` cannot be made (no trust roots, say).
    public static func connectionConfiguration(
        _ url: PostgresURL,
        applicationName: String? = nil,
        connectTimeout: Duration = .seconds(10)
    ) throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS =
            switch tlsConfiguration(url.sslMode) {
            case nil: .disable
            case let configuration?: .require(try NIOSSLContext(configuration: configuration))
            }
        var configuration = PostgresConnection.Configuration(
            host: url.host,
            port: url.port,
            username: url.user,
            password: url.password,
            database: url.database,
            tls: tls
        )
        configuration.options.connectTimeout = connectTimeout.timeAmount
        if let applicationName {
            configuration.options.additionalStartupParameters = [("application_name", applicationName)]
        }
        return configuration
    }

    /// The TLS settings of `mode`, or nil for plain TCP.
    static func tlsConfiguration(_ mode: PostgresURL.SSLMode) -> TLSConfiguration? {
        switch mode {
        case .disable:
            return nil
        case .require:
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .none
            return configuration
        case .verifyFull:
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .fullVerification
            return configuration
        }
    }

    private static func clientTLS(_ mode: PostgresURL.SSLMode) -> PostgresClient.Configuration.TLS {
        tlsConfiguration(mode).map { .require($0) } ?? .disable
    }
}
