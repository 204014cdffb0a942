import NIOCore

/// Bounds the time a public connection takes to say what it speaks: the TLS handshake and ALPN, or the first
/// bytes that tell HTTP/1.1 from HTTP/2's preface. Until a protocol's own handlers take the connection (and their
/// deadlines with it), nothing else times it; the setup removes this handler then. A connection still being set
/// up at the deadline (`limits.idleTimeout` from its opening) is closed.
///
/// A drain that begins meanwhile (`ChannelShouldQuiesceEvent`) would reach none of the protocol's handlers, which
/// are not there yet: it is kept, and passed on to them once they are (``handOver(_:)``).
final class ConnectionSetupDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?
    private var quiesced = false

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

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            quiesced = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The protocol's handlers are in place: the deadline is theirs now, and so is a drain that began meanwhile.
    func handOver(_ pipeline: ChannelPipeline) {
        pipeline.syncOperations.removeHandler(self, promise: nil)
        if quiesced { pipeline.syncOperations.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent()) }
    }
}
