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

    /// Session settings for a replica's connections, sent at start-up: a replica that vanishes (a lost host, a
    /// partition) leaves a half-open connection the server would otherwise keep for hours with TCP's defaults,
    /// holding the row locks and advisory locks of its open transaction meanwhile, and blocking every other
    /// replica's claims and writes on them.
    ///
    /// - `idle_in_transaction_session_timeout`: a transaction left waiting on its client ends after 10 s;
    /// - `tcp_keepalives_*`: the server probes an idle connection after 10 s and drops it after 3 unanswered
    ///   probes 5 s apart;
    /// - `lock_timeout`: a statement waits at most 5 s for a lock, as long as an operation may take.
    public static let sessionSafeguards: [(String, String)] = [
        ("idle_in_transaction_session_timeout", "10s"),
        ("tcp_keepalives_idle", "10"),
        ("tcp_keepalives_interval", "5"),
        ("tcp_keepalives_count", "3"),
        ("lock_timeout", "5s"),
    ]

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
