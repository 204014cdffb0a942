import NIOCore
import NIOHTTP2

/// Closes an HTTP/2 connection that has had no stream open for `limits.idleTimeout`: GOAWAY, then the close. It
/// keeps the streams open by the events the connection handler sends down the pipeline as they open and close, and
/// its clock starts when it is added, which is when the connection's protocol became known (after the TLS handshake
/// and ALPN, or the preface).
///
/// The connection handler also reports closed a stream it refused in its HEADERS frame (a `content-length` its
/// END_STREAM contradicts) without having reported it open. Such a close is not passed on: the connection manager
/// behind this handler counts streams too, and asserts that a stream it hears closed was open.
///
/// swift-nio-http2's connection manager has an idle limit of its own, but it starts only when the connection
/// becomes active (before ALPN here, so never), and it closes only once the client has answered a PING: a client
/// that opens no stream and stays silent would hold its connection, and a slot of `limits.maxConnections`, for good.
final class HTTP2IdleTimeout: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let timeout: TimeAmount
    private var openStreams: Set<HTTP2StreamID> = []
    /// When the last stream closed (or the handler was added): the limit runs from here while no stream is open.
    private var idleSince = NIODeadline.uptimeNanoseconds(0)
    /// The one timer: it is not moved as streams open and close (a client with one stream at a time would cost a
    /// timer set and cancelled a request); when it fires early it looks again at the time that is left.
    private var scheduled: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        idleSince = context.eventLoop.now
        schedule(at: idleSince + timeout, context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        scheduled?.cancel()
        scheduled = nil
        self.context = nil
    }

    private var context: ChannelHandlerContext?

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let created as NIOHTTP2StreamCreatedEvent:
            openStreams.insert(created.streamID)
        case let closed as StreamClosedEvent:
            guard openStreams.remove(closed.streamID) != nil else { return }
            if openStreams.isEmpty { idleSince = context.eventLoop.now }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func schedule(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        scheduled = context.eventLoop.scheduleTask(deadline: deadline) {
            loopBound.value.timerFired()
        }
    }

    /// The timer fired: a stream open puts the limit off by a whole `timeout`; otherwise the connection has been
    /// idle since `idleSince`, and goes if that was `timeout` ago.
    private func timerFired() {
        scheduled = nil
        guard let context else { return }
        let now = context.eventLoop.now
        guard openStreams.isEmpty else { return schedule(at: now + timeout, context: context) }
        guard now >= idleSince + timeout else { return schedule(at: idleSince + timeout, context: context) }
        let goAway = HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil)
        )
        context.writeAndFlush(NIOAny(goAway)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}
