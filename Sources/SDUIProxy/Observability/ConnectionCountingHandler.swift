import NIOCore

/// Keeps ``ProxyMetrics``' open-connection gauge in step with a connection: one up when the connection is
/// active, one down when it closes. Put it first in each accepted connection's pipeline.
///
/// It counts a connection at most once, even if it is added to a channel that is already active, and takes
/// its count back if it is removed from a live channel, so the gauge cannot drift.
public final class ConnectionCountingHandler: ChannelInboundHandler, RemovableChannelHandler {
    /// Whatever the connection reads; it passes through untouched.
    public typealias InboundIn = NIOAny

    private let metrics: ProxyMetrics
    private var counted = false

    /// Counts connections into `metrics`.
    public init(metrics: ProxyMetrics) {
        self.metrics = metrics
    }

    /// Counts the connection if it is already active (the handler was added late).
    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { open() }
    }

    /// Counts the connection.
    public func channelActive(context: ChannelHandlerContext) {
        open()
        context.fireChannelActive()
    }

    /// Takes the connection out of the count.
    public func channelInactive(context: ChannelHandlerContext) {
        close()
        context.fireChannelInactive()
    }

    /// Takes the connection out of the count if the handler leaves a live pipeline.
    public func handlerRemoved(context: ChannelHandlerContext) {
        close()
    }

    private func open() {
        guard !counted else { return }
        counted = true
        metrics.connectionOpened()
    }

    private func close() {
        guard counted else { return }
        counted = false
        metrics.connectionClosed()
    }
}

@available(*, unavailable)
extension ConnectionCountingHandler: Sendable {}
