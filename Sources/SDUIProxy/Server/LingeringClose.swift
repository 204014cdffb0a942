import NIOCore

extension ChannelHandlerContext {
    /// Ends the connection after its last answer was written, without losing that answer.
    ///
    /// A socket closed while the client's bytes sit unread in it is reset, not closed (RFC 9112 9.6), and a
    /// reset can discard the answer before the client reads it: a client still sending a refused body would see
    /// "connection reset" instead of its 401 or 413. So the proxy shuts down its sending side only (the client
    /// sees the answer, then the end of the stream), reads and drops whatever the client still sends, and closes
    /// once the client has closed too, or after a quiet spell. It is nginx's lingering close.
    func closeAfterAnswer(lingering: LingeringClose.Limits = .init()) {
        guard channel.isActive, (try? channel.pipeline.syncOperations.handler(type: LingeringClose.self)) == nil
        else { return }
        let closer = LingeringClose(limits: lingering)
        do {
            try channel.pipeline.syncOperations.addHandler(closer, position: .first)
        } catch {
            close(promise: nil)
            return
        }
        channel.close(mode: .output).assumeIsolated().whenFailure { [channel] _ in channel.close(promise: nil) }
    }
}

/// Drops what a connection reads after its answer, and closes it when the client does or when it is over.
///
/// It sits first in the pipeline, so nothing read after the answer reaches the handlers that answered, and it
/// asks for reads itself, since those handlers may have paused reading.
final class LingeringClose: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    struct Limits: Sendable {
        /// How long the client may send nothing before the connection is closed (nginx's `lingering_timeout`).
        var quietTimeout: TimeAmount = .seconds(5)
        /// The longest the client may keep sending (nginx's `lingering_time`): a refused upload that never ends
        /// does not hold the connection for good.
        var maximumTime: TimeAmount = .seconds(30)
    }

    private let limits: Limits
    private var giveUpAt: NIODeadline = .distantFuture
    private var timer: Scheduled<Void>?

    init(limits: Limits) {
        self.limits = limits
    }

    func handlerAdded(context: ChannelHandlerContext) {
        giveUpAt = context.eventLoop.now + limits.maximumTime
        armTimer(context: context)
        context.read()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Dropped: the answer is already out, and the request it belonged to was refused or is over.
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        armTimer(context: context)
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    private func armTimer(context: ChannelHandlerContext) {
        timer?.cancel()
        let at = min(context.eventLoop.now + limits.quietTimeout, giveUpAt)
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: at) { loopBound.value.close(promise: nil) }
    }
}
