import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Sets up each connection of the admin listener: clear-text HTTP/1.1 through NIO's server pipeline, the
/// ``AdminGate`` (token, deadlines), a request aggregator bounded by the largest prefetch request, and the
/// ``AdminHTTPHandler``.
struct AdminConnectionPipeline: Sendable {
    let runtime: ProxyRuntime
    let router: AdminRouter
    let authorization: AdminAuthorization
    /// How long a new connection may take to send its first request.
    let firstRequestTimeout: TimeAmount
    let logger: Logger

    /// Configures `channel`, on its loop.
    func configure(_ channel: any Channel) throws {
        let sync = channel.pipeline.syncOperations
        try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
        // The limits in force when the connection opens: a reload's apply to the next ones.
        let limits = runtime.context.configuration.limits
        try sync.addHandler(
            AdminGate(
                authorization: authorization,
                idleTimeout: limits.idleTimeout.timeAmount,
                requestTimeout: limits.requestTimeout.timeAmount,
                firstRequestTimeout: firstRequestTimeout
            )
        )
        try sync.addHandler(
            NIOHTTPServerRequestAggregator(maxContentLength: ProxyConfiguration.Prefetch.largestRequestBytes)
        )
        try sync.addHandler(AdminHTTPHandler(router: router, authorization: authorization, logger: logger))
    }
}
