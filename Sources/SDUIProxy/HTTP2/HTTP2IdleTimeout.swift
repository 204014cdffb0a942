import NIOCore
import NIOHTTP2

/// Closes an HTTP/2 connection that has had no stream open for `limits.idleTimeout`: GOAWAY, then the close. It
/// counts streams from the connection handler's events, and its clock starts when it is added, which is when the
/// connection's protocol became known (after the TLS handshake and ALPN, or the preface).
///
/// swift-nio-http2's connection manager has an idle limit of its own, but it starts only when the connection
/// becomes active (before ALPN here, so never), and it closes only once the client has answered a PING: a client
/// that opens no stream and stays silent would hold its connection, and a slot of `limits.maxConnections`, for good.
final class HTTP2IdleTimeout: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let timeout: TimeAmount
    private var openStreams = 0
    private var scheduled: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        schedule(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        scheduled?.cancel()
        scheduled = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case is NIOHTTP2StreamCreatedEvent:
            openStreams += 1
            scheduled?.cancel()
            scheduled = nil
        case is StreamClosedEvent:
            openStreams = max(0, openStreams - 1)
            if openStreams == 0 { schedule(context: context) }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func schedule(context: ChannelHandlerContext) {
        scheduled?.cancel()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        scheduled = context.eventLoop.scheduleTask(in: timeout) {
            let context = loopBound.value
            let goAway = HTTP2Frame(
                streamID: .rootStream,
                payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil)
            )
            context.writeAndFlush(NIOAny(goAway)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }
}
