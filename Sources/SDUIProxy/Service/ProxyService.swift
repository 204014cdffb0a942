import Logging
import NIOCore
import ServiceLifecycle
import SDUIProxyCore

/// The proxy as a swift-service-lifecycle `Service`: it starts the ``ProxyServer`` and, on graceful
/// shutdown (SIGTERM, SIGINT), drains it.
public struct ProxyService: Service {
    public let configuration: ProxyConfiguration
    public let logger: Logger
    public let drainTimeout: TimeAmount

    public init(configuration: ProxyConfiguration, logger: Logger, drainTimeout: TimeAmount = .seconds(10)) {
        self.configuration = configuration
        self.logger = logger
        self.drainTimeout = drainTimeout
    }

    public func run() async throws {
        let server = try await ProxyServer.start(configuration: configuration, logger: logger)
        // Waits for a shutdown signal; cancellation (an error in another service) ends the wait too.
        try? await gracefulShutdown()
        await server.shutdown(drainTimeout: drainTimeout)
    }
}
