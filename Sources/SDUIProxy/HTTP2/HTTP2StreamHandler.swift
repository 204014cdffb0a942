import Logging
import NIOCore
import NIOHTTP1
import NIOHTTP2
import SDUIProxyCore

/// One HTTP/2 stream of the public listener: one request and its response. It drives the stream's
/// ``RequestExchange`` as the HTTP/1.1 connection drives its current request's (``RequestExchangeDriver``): the same
/// routing, bodies, limits and responders; what is the stream's own is below.
///
/// - Framing and keep-alive are the connection's (`NIOHTTP2Handler`), and the head it sees is the one
///   `HTTP2FramePayloadToHTTP1ServerCodec` makes of the HEADERS frame: `:authority` is `Host`, the version is 2.0.
/// - Reading pauses while the body's taker is full by holding back the stream's reads, and the stream's flow
///   control then stops the client: the window is only opened again for data the stream has read.
/// - A request has `limits.requestTimeout` to arrive whole from the stream's opening; then it is answered 408 and the
///   stream is reset. The connection's idle limit is the connection manager's.
/// - A response cut short resets the stream; a refusal answered before the body was whole drops the rest of it
///   until the request deadline. The client's connection and its other streams go on.
///
/// Responders write to it as their ``ResponseSink`` (``HTTP2StreamHandler+ResponseSink.swift``).
final class HTTP2StreamHandler: ChannelDuplexHandler, RequestExchangeDriver {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let runtime: ProxyRuntime
    /// The context in force when the stream opened.
    let proxy: ProxyContext
    let cacheResponder: CacheResponder
    var exchange: RequestExchange
    /// The loop's tally of responses, for the counters.
    let requests: RequestTally
    /// Counts and logs the request when its response ends; nil until it starts and once recorded.
    var accounting: RequestAccounting?
    /// What the response has written so far.
    var response = ResponseProgress()
    /// The request is HEAD: no body goes out.
    var isHeadRequest = false
    /// The client's END_STREAM has arrived.
    var requestEnded = false
    /// The stream is reset once its response is out, without reading the rest of the request.
    var resetsAfterResponse = false
    /// Reading is held back while the body's taker is full; a read asked for meanwhile waits.
    private var readingPaused = false
    private var readPending = false
    /// Fires `limits.requestTimeout` after the stream opened, unless the request arrived whole.
    private var requestDeadline: Scheduled<Void>?
    var peer: ClientPeer?
    let isSecure: Bool
    var context: ChannelHandlerContext?
    let loop: any EventLoop

    /// What the response has written.
    struct ResponseProgress {
        var status = HTTPResponseStatus.ok
        var cacheResult: CacheResult?
        var bodyBytes = 0
        var headWritten = false
        var ended = false
    }

    init(runtime: ProxyRuntime, eventLoop: any EventLoop, requests: RequestTally, isSecure: Bool) {
        self.runtime = runtime
        let proxy = runtime.context
        self.proxy = proxy
        self.cacheResponder = CacheResponder(proxy.configuration)
        self.exchange = RequestExchange(maxBodyBytes: proxy.configuration.limits.maxBodyBytes)
        self.requests = requests
        self.isSecure = isSecure
        self.loop = eventLoop
    }

    func withProxy<Result>(_ body: (ProxyContext) -> Result) -> Result {
        body(proxy)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        requests.countStreamOpened()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        requestDeadline = context.eventLoop.scheduleTask(in: proxy.configuration.limits.requestTimeout.timeAmount) {
            loopBound.value.requestTimedOut()
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        requestDeadline?.cancel()
        requestDeadline = nil
        self.context = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            isHeadRequest = head.method == .HEAD
            accounting = RequestAccounting(
                proxy: proxy,
                head: head,
                clientAddress: client.address,
                clock: context.eventLoop
            )
            exchangeReceivedHead(head)
        case .body(let part):
            exchangeReceivedBody(part)
        case .end:
            requestEnded = true
            requestDeadline?.cancel()
            requestDeadline = nil
            // Answered on the loop's next turn, once the frames read with this one are handled: a client that
            // opens streams and resets them at once (rapid reset) has its reset handled first, and starts no fill.
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute {
                let handler = loopBound.value
                guard handler.context?.channel.isActive == true else {
                    _ = handler.exchange.abandon()
                    return
                }
                handler.exchangeReceivedEnd()
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // The client reset the stream, or the connection went: a body streaming to the backend fails, one read
        // whole is let go.
        exchangeAbandoned(because: ProxyError(.network, "the client reset the stream"))
        if !response.ended, response.headWritten { abandonResponse() }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        proxy.logger.debug("HTTP/2 stream error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // A drain is the connection's: its manager sends GOAWAY, and the streams open finish.
        if event is ChannelShouldQuiesceEvent { return }
        context.fireUserInboundEventTriggered(event)
    }

    private func requestTimedOut() {
        requestDeadline = nil
        guard let context, !requestEnded else { return }
        // Answered already, the rest of its body still coming: the stream is reset.
        guard !response.ended else { return context.close(promise: nil) }
        proxy.logger.info(
            "request timed out while being read",
            metadata: ["client": "\(client.address ?? "?")", "protocol": "HTTP/2"]
        )
        let error = ProxyError(.requestTimeout, "the request was not complete within limits.requestTimeout")
        resetsAfterResponse = true
        // A body streaming to the backend fails with it: its forward answers, or cuts its answer short.
        if exchangeAbandoned(because: error) { return }
        guard !response.headWritten else { return context.close(promise: nil) }
        write(error)
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        guard !readingPaused else {
            readPending = true
            return
        }
        context.read()
    }

    // MARK: What the exchange leaves to the stream

    func bodyTakerFull() {
        readingPaused = true
    }

    func bodyTakerReady() {
        guard readingPaused else { return }
        readingPaused = false
        if readPending {
            readPending = false
            context?.read()
        }
    }

    func closeAfterResponse() {
        resetsAfterResponse = true
    }

    /// The response is out: the stream ends once the request has too. The rest of a request answered before it was
    /// whole is read and dropped, as HTTP/1.1's lingering close does, so the client reads its answer rather than a
    /// reset (async-http-client, for one, takes even `RST_STREAM(NO_ERROR)` for a failure); a client still sending
    /// at the request deadline has its stream reset then.
    func finishStream() {
        guard !requestEnded, resetsAfterResponse else { return }
        exchangeAnsweredEarly()
        bodyTakerReady()
    }
}
