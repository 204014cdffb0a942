import NIOCore

/// Bounds the time a public connection takes to say what it speaks: the TLS handshake and ALPN, or the first
/// bytes that tell HTTP/1.1 from HTTP/2's preface. Until a protocol's own handlers take the connection (and their
/// deadlines with it), nothing else times it; the setup removes this handler then. A connection still being set
/// up at the deadline (`limits.idleTimeout` from its opening) is closed.
final class ConnectionSetupDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        scheduled = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        scheduled?.cancel()
        scheduled = nil
    }
}
