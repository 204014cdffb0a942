import NIOCore
import SDUIProxyCore
import Synchronization

/// Counts and caps the open connections of a listener (`limits.maxConnections`): one over the cap is answered
/// 503 with the error body and closed, before any of its bytes are parsed. Admitted connections are what the
/// `sdui_open_connections` gauge reports.
final class ConnectionLimiter: Sendable {
    private let open = Atomic<Int>(0)
    let maximum: Int
    private let metrics: ProxyMetrics?

    init(maximum: Int, metrics: ProxyMetrics? = nil) {
        self.maximum = maximum
        self.metrics = metrics
    }

    var openConnections: Int { open.load(ordering: .relaxed) }

    /// A handler for one accepted connection; it must be first in the pipeline.
    func makeHandler() -> Handler {
        Handler(limiter: self)
    }

    final class Handler: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        private let limiter: ConnectionLimiter
        private var admitted = false

        init(limiter: ConnectionLimiter) {
            self.limiter = limiter
        }

        func channelActive(context: ChannelHandlerContext) {
            let count = limiter.open.wrappingAdd(1, ordering: .relaxed).newValue
            guard count <= limiter.maximum else {
                limiter.open.wrappingSubtract(1, ordering: .relaxed)
                let error = ProxyError(.unavailable, "too many open connections (limits.maxConnections)")
                let body = error.jsonBody()
                let response =
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
                context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: response)))
                    .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                return
            }
            admitted = true
            limiter.metrics?.connectionOpened()
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard admitted else { return }
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            if admitted {
                admitted = false
                limiter.open.wrappingSubtract(1, ordering: .relaxed)
                limiter.metrics?.connectionClosed()
            }
            context.fireChannelInactive()
        }
    }
}
