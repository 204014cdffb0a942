import Logging
import NIOCore
import SDUIProxyCore
import ServiceLifecycle
import UnixSignals

/// The proxy as the command line runs it: the ``ProxyServer``'s services in their one `ServiceGroup`, which
/// drains them on SIGTERM and SIGINT (``gracefulShutdownSignals``), with one more that reloads the configuration
/// on SIGHUP. `run()` returns once they have stopped, and throws the error of a service that failed.
///
/// It is a `Service` too: run in another group, it shuts down when that group does.
public struct ProxyService: Service {
    /// Reads the configuration again (the same file, environment and flags as at start-up).
    public typealias ConfigurationSource = @Sendable () throws -> ProxyConfiguration

    public let configuration: ProxyConfiguration
    public let logger: Logger
    public let drainTimeout: TimeAmount
    /// The signals that shut the proxy down gracefully.
    public let gracefulShutdownSignals: [UnixSignal]
    private let adminAuthorization: AdminAuthorization
    private let reloadSource: ConfigurationSource?
    private let logLevel: LogLevelControl?

    /// - Parameters:
    ///   - reloadSource: where SIGHUP reads the new configuration from; nil ignores SIGHUP.
    ///   - logLevel: the process's log level, which a reload sets to the new `log.level`.
    ///   - gracefulShutdownSignals: none when another group, run with signals of its own, runs this service.
    public init(
        configuration: ProxyConfiguration,
        logger: Logger,
        adminAuthorization: AdminAuthorization = AdminAuthorization(token: nil),
        reloadSource: ConfigurationSource? = nil,
        logLevel: LogLevelControl? = nil,
        drainTimeout: TimeAmount = .seconds(10),
        gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint]
    ) {
        self.configuration = configuration
        self.logger = logger
        self.adminAuthorization = adminAuthorization
        self.reloadSource = reloadSource
        self.logLevel = logLevel
        self.drainTimeout = drainTimeout
        self.gracefulShutdownSignals = gracefulShutdownSignals
    }

    public func run() async throws {
        let server = try await ProxyServer.prepare(
            configuration: configuration,
            logger: logger,
            adminAuthorization: adminAuthorization,
            eventLoopGroup: nil,
            tuning: ProxyServer.Tuning()
        )
        // Last in the group, so the first to stop: no reload begins once the listeners drain.
        var additional: [any Service] = []
        if let reloadSource {
            additional.append(ReloadOnSignal { await reload(server, from: reloadSource) })
        }
        // Run as a service of another group, this one shuts down with it.
        try await withGracefulShutdownHandler {
            try await server.run(
                gracefulShutdownSignals: gracefulShutdownSignals,
                additionalServices: additional,
                drainTimeout: drainTimeout
            )
        } onGracefulShutdown: { [drainTimeout] in
            Task { await server.shutdown(drainTimeout: drainTimeout) }
        }
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

/// Reloads the configuration on each SIGHUP until the group shuts down.
struct ReloadOnSignal: Service, CustomStringConvertible {
    let reload: @Sendable () async -> Void

    var description: String { "ReloadOnSignal(SIGHUP)" }

    func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            await reload()
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
