import NIOCore
import NIOExtras

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
        channel.close(mode: .output).assumeIsolated().whenFailure { _ in closer.closeNow() }
    }
}

/// Drops what a connection reads after its answer, and closes it when the client does (the listeners do not
/// allow half-closed connections, so the client's end of stream closes the channel) or when time is up.
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

        /// While the proxy drains, a closing connection must not hold up its shutdown for long.
        static let whileDraining = Limits(quietTimeout: .seconds(1), maximumTime: .seconds(2))
    }

    private var limits: Limits
    private var context: ChannelHandlerContext?
    private var giveUpAt: NIODeadline = .distantFuture
    private var lastRead: NIODeadline = .distantPast
    /// One wake-up at a time: a read only moves ``lastRead``, and the wake-up looks again when it fires.
    private var wakeUp: Scheduled<Void>?

    init(limits: Limits) {
        self.limits = limits
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        lastRead = context.eventLoop.now
        giveUpAt = lastRead + limits.maximumTime
        scheduleWakeUp(context: context)
        context.read()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        wakeUp?.cancel()
        wakeUp = nil
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Dropped: the answer is already out, and the request it belonged to was refused or is over.
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        lastRead = context.eventLoop.now
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case is ChannelShouldQuiesceEvent:
            // The proxy is draining: the client still gets the time to read its answer, but not more.
            limits.quietTimeout = min(limits.quietTimeout, Limits.whileDraining.quietTimeout)
            giveUpAt = min(giveUpAt, context.eventLoop.now + Limits.whileDraining.maximumTime)
            wakeUp?.cancel()
            scheduleWakeUp(context: context)
        case is ConnectionLimiter.CloseNow:
            context.close(promise: nil)
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        wakeUp?.cancel()
        wakeUp = nil
        context.fireChannelInactive()
    }

    /// Closes the connection now: half-closing it failed.
    func closeNow() {
        context?.close(promise: nil)
    }

    private func scheduleWakeUp(context: ChannelHandlerContext) {
        let at = min(lastRead + limits.quietTimeout, giveUpAt)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        wakeUp = context.eventLoop.scheduleTask(deadline: at) { loopBound.value.wokeUp() }
    }

    private func wokeUp() {
        wakeUp = nil
        guard let context else { return }
        if context.eventLoop.now >= min(lastRead + limits.quietTimeout, giveUpAt) {
            context.close(promise: nil)
        } else {
            scheduleWakeUp(context: context)
        }
    }
}
