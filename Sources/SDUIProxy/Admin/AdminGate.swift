import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Stands between the admin listener's HTTP decoder and the body aggregator, so that a client without the token costs
/// the listener nothing: its request is answered 401 on its head, before any of its body is read, and the connection
/// closed. It also closes a connection idle for `idleTimeout` between requests (or for `firstRequestTimeout`, by
/// default ``defaultFirstRequestTimeout``, before its first), and one whose request is not complete `requestTimeout`
/// after its head: without them, a client could hold a connection, or one of the listener's few slots, and a part-read
/// body for as long as it liked.
final class AdminGate: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let authorization: AdminAuthorization
    private let idleTimeout: TimeAmount
    private let requestTimeout: TimeAmount
    /// Closes the connection when it fires: the idle wait, or the wait for the rest of a request.
    private var deadline: Scheduled<Void>?
    /// The refused request's remaining parts are dropped while its answer is written and the connection closes.
    private var refusing = false
    /// Whether a request's head has come and its end not yet.
    private var readingRequest = false
    /// Whether the current request's answer has been written to its end.
    private var answered = true

    /// How long a new connection may wait before its first request, by default: probes and operators send theirs
    /// at once, and a connection that sends nothing holds one of the listener's slots.
    static let defaultFirstRequestTimeout: TimeAmount = .seconds(5)
    private let firstRequestTimeout: TimeAmount

    init(
        authorization: AdminAuthorization,
        idleTimeout: TimeAmount,
        requestTimeout: TimeAmount,
        firstRequestTimeout: TimeAmount = AdminGate.defaultFirstRequestTimeout
    ) {
        self.authorization = authorization
        self.idleTimeout = idleTimeout
        self.requestTimeout = requestTimeout
        self.firstRequestTimeout = firstRequestTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { closeAfter(min(idleTimeout, firstRequestTimeout), context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        closeAfter(min(idleTimeout, firstRequestTimeout), context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ConnectionLimiter.CloseNow {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refusing else { return }
        let part = unwrapInboundIn(data)
        switch part {
        case .head(let head):
            guard authorization.isAuthorized(head.headers, path: head.uri) else {
                refusing = true
                deadline?.cancel()
                AdminHTTPHandler.write(
                    AdminAuthorization.unauthorizedResponse(for: head.uri),
                    isHead: head.method.isHEAD,
                    keepAlive: false,
                    context: context
                )
                return
            }
            readingRequest = true
            answered = false
            closeAfter(requestTimeout, context: context)
        case .end:
            readingRequest = false
            if answered {
                // Answered before it was read to its end (a body too large): idle from now.
                closeAfter(idleTimeout, context: context)
            } else {
                // The answer may take a while (a prefetch): no deadline until it is written.
                deadline?.cancel()
                deadline = nil
            }
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            answered = true
            if !readingRequest { closeAfter(idleTimeout, context: context) }
        }
        context.write(data, promise: promise)
    }

    /// A close from the handlers behind the gate follows an answer (the aggregator's 413, the handler's 401),
    /// and the client may still be sending: it lingers, so that the answer is not lost to a reset. The gate's own
    /// deadlines, and ``ConnectionLimiter/CloseNow``, close from its context, past this. A close once lingering
    /// has begun (the aggregator reports a body too large, then closes) waits for the lingering close's end.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .all, context.channel.isActive else {
            context.close(mode: mode, promise: promise)
            return
        }
        context.closeAfterAnswer()
        context.channel.closeFuture.cascade(to: promise)
    }

    private func closeAfter(_ timeout: TimeAmount, context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        guard context.channel.isActive else { return }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) { loopBound.value.close(promise: nil) }
    }
}

extension AdminGate: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Without the token: see ``AdminAuthorization``'s description.
    var description: String { "AdminGate(authorization: \(authorization))" }

    var debugDescription: String { description }

    var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "authorization": authorization, "idleTimeout": idleTimeout, "requestTimeout": requestTimeout,
            ],
            displayStyle: .class
        )
    }
}
