import Logging
import NIOCore
import SDUIProxyCore
import ServiceLifecycle
import UnixSignals

/// The proxy as a swift-service-lifecycle `Service`: it starts the ``ProxyServer``, reloads the
/// configuration on SIGHUP, and on graceful shutdown (SIGTERM, SIGINT) drains it.
public struct ProxyService: Service {
    /// Reads the configuration again (the same file, environment and flags as at start-up).
    public typealias ConfigurationSource = @Sendable () throws -> ProxyConfiguration

    public let configuration: ProxyConfiguration
    public let logger: Logger
    public let drainTimeout: TimeAmount
    private let adminAuthorization: AdminAuthorization
    private let reloadSource: ConfigurationSource?
    private let logLevel: LogLevelControl?

    /// - Parameters:
    ///   - reloadSource: where SIGHUP reads the new configuration from; nil ignores SIGHUP.
    ///   - logLevel: the process's log level, which a reload sets to the new `log.level`.
    public init(
        configuration: ProxyConfiguration,
        logger: Logger,
        adminAuthorization: AdminAuthorization = AdminAuthorization(token: nil),
        reloadSource: ConfigurationSource? = nil,
        logLevel: LogLevelControl? = nil,
        drainTimeout: TimeAmount = .seconds(10)
    ) {
        self.configuration = configuration
        self.logger = logger
        self.adminAuthorization = adminAuthorization
        self.reloadSource = reloadSource
        self.logLevel = logLevel
        self.drainTimeout = drainTimeout
    }

    public func run() async throws {
        let server = try await ProxyServer.start(
            configuration: configuration,
            logger: logger,
            adminAuthorization: adminAuthorization
        )
        await withTaskGroup(of: Void.self) { group in
            if let reloadSource {
                group.addTask {
                    for await _ in await UnixSignalsSequence(trapping: .sighup) {
                        await reload(server, from: reloadSource)
                    }
                }
            }
            // Waits for a shutdown signal; cancellation (an error in another service) ends the wait too.
            try? await gracefulShutdown()
            group.cancelAll()
        }
        await server.shutdown(drainTimeout: drainTimeout)
    }

    private func reload(_ server: ProxyServer, from source: ConfigurationSource) async {
        logger.info("SIGHUP: reloading the configuration")
        do {
            let configuration = try source()
            // The level first: the new context's parts read it as they are built (the fetcher, once).
            let previousLevel = logLevel?.level
            if let logLevel, let level = Logger.Level(rawValue: configuration.log.level) { logLevel.level = level }
            do {
                try await server.reload(configuration)
            } catch {
                if let logLevel, let previousLevel { logLevel.level = previousLevel }
                throw error
            }
        } catch {
            logger.error("config reload refused; the running configuration stays", metadata: ["error": "\(error)"])
        }
    }
}

extension ProxyService: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The listeners and whether an admin token is set: swift-service-lifecycle logs this at debug, and the token
    /// must not reach a log.
    public var description: String {
        let listen = configuration.listen
        let admin = configuration.admin
        return "ProxyService(listen: \(listen.host):\(listen.port), admin: \(admin.host):\(admin.port), "
            + "adminAuthorization: \(adminAuthorization))"
    }

    public var debugDescription: String { description }

    /// The stored properties, the admin authorization by its redacting mirror.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "configuration": configuration, "adminAuthorization": adminAuthorization,
                "drainTimeout": drainTimeout, "reloads": reloadSource != nil,
            ],
            displayStyle: .struct
        )
    }
}
