import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
import SDUIProxyCore

/// One HTTP/2 stream of the public listener: one request and its response. It drives the stream's
/// ``RequestExchange`` as the HTTP/1.1 connection drives its current request's (``RequestExchangeDriver``): the same
/// routing, bodies, limits and responders; what is the stream's own is below.
///
/// - Framing and keep-alive are the connection's (`NIOHTTP2Handler`). The handler reads and writes the stream's
///   frame payloads itself, with no HTTP/1 codec between: the head it routes is ``HTTP2RequestHead``'s reading of
///   the HEADERS frame (`:authority` is `Host`, the version 2.0), and a response's fields go into the HPACK block
///   as they are produced (a stored entry's from its stored lines), not through an HTTP/1 head converted again.
///   Measured with callgrind against the codec, this takes fewer instructions per hit (see `Benchmarks/HISTORY.md`).
/// - Reading pauses while the body's taker is full by holding back the stream's reads, and the stream's flow
///   control then stops the client: the window is only opened again for data the stream has read.
/// - A request has `limits.requestTimeout` to arrive whole from the stream's opening; then it is answered 408 and the
///   stream is reset. The connection's idle limit is the connection manager's.
/// - A response cut short resets the stream; a response that ends before the request did drops the rest of its body
///   until the request deadline, then resets the stream. The client's connection and its other streams go on.
///
/// Responders write to it as their ``ResponseSink`` (``HTTP2StreamHandler+ResponseSink.swift``).
final class HTTP2StreamHandler: ChannelDuplexHandler, RequestExchangeDriver {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    /// The context in force when the stream opened.
    let proxy: ProxyContext
    let cacheResponder: CacheResponder
    /// The stream's request. Without dynamic exclusivity checks, as the HTTP/1.1 connection's: read and changed on
    /// the loop only, by the exchange driver, whose accesses never overlap.
    @exclusivity(unchecked) var exchange: RequestExchange
    /// The loop's tally of responses, for the counters.
    let requests: RequestTally
    /// Counts and logs the request when its response ends; nil until it starts and once recorded.
    var accounting: RequestAccounting? { didSet { accessNotes = accounting?.notes } }
    /// The request's notes, kept beside `accounting`: responders read them often, and a read then copies nothing.
    private(set) var accessNotes: AccessNotes?
    /// What the response has written so far.
    var response = ResponseProgress()
    /// The request is HEAD: no body goes out.
    var isHeadRequest = false
    /// The request's HEADERS frame has arrived; a later one holds trailers.
    var headArrived = false
    /// The client's END_STREAM has arrived.
    var requestEnded = false
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
        /// The head carried END_STREAM: nothing follows it (HEAD, 204, 304).
        var endedWithHead = false
        var ended = false
    }

    init(runtime: ProxyRuntime, eventLoop: any EventLoop, requests: RequestTally, isSecure: Bool) {
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
    }

    /// Starts `limits.requestTimeout` for a request whose body follows its head. The stream opened with the
    /// HEADERS frame just read, so the time runs from its opening; a request whole in its HEADERS frame (almost
    /// every GET) needs no deadline, and schedules none.
    private func startRequestDeadline(context: ChannelHandlerContext) {
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
        case .headers(let headers):
            // Trailers, after the head, are checked and dropped: the backend is sent none.
            guard !headArrived else {
                if let violation = HTTP2RequestHead.violation(inTrailers: headers.headers) {
                    return resetMalformed(violation, context: context)
                }
                if headers.endStream { requestArrivedWhole(context: context) }
                return
            }
            headArrived = true
            if !headers.endStream { startRequestDeadline(context: context) }
            let head: HTTPRequestHead
            switch HTTP2RequestHead.make(headers.headers, endStream: headers.endStream) {
            case .success(let made): head = made
            case .failure(.malformed(let violation)):
                return resetMalformed(violation, context: context)
            case .failure(.refused(let error)):
                requestEnded = true
                return refuse(error, context: context)
            }
            isHeadRequest = head.method.isHEAD
            accounting = RequestAccounting(
                proxy: proxy,
                head: head,
                clientAddress: client.address,
                clock: context.eventLoop
            )
            guard headers.endStream else {
                // A body follows: routed now, so that it has somewhere to go.
                return exchangeReceivedHead(head)
            }
            requestArrivedWhole(context: context, head: head)
        case .data(let data):
            if case .byteBuffer(let part) = data.data, part.readableBytes > 0 { exchangeReceivedBody(part) }
            if data.endStream { requestArrivedWhole(context: context) }
        default:
            break
        }
    }

    /// The client's END_STREAM arrived (with the head, when `head` is given): the request is routed and answered on
    /// the loop's next turn, once the frames read with it are handled. A client that opens streams and resets them
    /// at once (rapid reset) has its reset handled first: its request reaches no responder, and neither a fill nor
    /// a forward starts.
    private func requestArrivedWhole(context: ChannelHandlerContext, head: HTTPRequestHead? = nil) {
        requestEnded = true
        requestDeadline?.cancel()
        requestDeadline = nil
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let handler = loopBound.value
            guard handler.context?.channel.isActive == true else {
                _ = handler.exchange.abandon()
                return
            }
            if let head { handler.exchangeReceivedHead(head) }
            handler.exchangeReceivedEnd()
        }
    }

    /// Answers `error` for a request that cannot be routed, and resets the stream after it.
    private func refuse(_ error: ProxyError, context: ChannelHandlerContext) {
        proxy.logger.info("HTTP/2 request refused", metadata: ["error": "\(error)"])
        write(error)
        context.close(promise: nil)
    }

    /// A malformed request (RFC 9113 section 8.1.1) is a stream error: the stream is reset with PROTOCOL_ERROR,
    /// unanswered; the connection and its other streams go on. A body already streaming to the backend fails.
    private func resetMalformed(_ violation: HTTP2RequestFieldRules.Violation, context: ChannelHandlerContext) {
        proxy.logger.info(
            "HTTP/2 stream reset: malformed request",
            metadata: ["client": "\(client.address ?? "?")", "reason": "\(violation)"]
        )
        requestEnded = true
        requestDeadline?.cancel()
        requestDeadline = nil
        exchangeAbandoned(because: ProxyError(.badRequest, "malformed HTTP/2 request: \(violation)"))
        abandonResponse()
        context.writeAndFlush(wrapOutboundOut(.rstStream(.protocolError)), promise: nil)
        context.close(promise: nil)
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

    /// The request did not arrive whole in time. Its stream is reset once what answers it is out: the 408, or what
    /// the forward that streamed its body answers; one answered already is reset now.
    private func requestTimedOut() {
        requestDeadline = nil
        guard let context, !requestEnded else { return }
        guard !response.headWritten else { return context.close(promise: nil) }
        var metadata: Logger.Metadata = ["client": "\(client.address ?? "?")", "protocol": "h2"]
        if let requestID = accessNotes?.requestID { metadata["request_id"] = .string(requestID) }
        proxy.logger.info("request timed out while being read", metadata: metadata)
        let error = ProxyError(.requestTimeout, "the request was not complete within limits.requestTimeout")
        // A body streaming to the backend fails with it: its forward answers, or cuts its answer short.
        if exchangeAbandoned(because: error) { return }
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

    /// Nothing to do: whenever a stream's response ends before its request, the rest of the request is dropped
    /// (``finishStream()``); the connection and its other streams go on.
    func closeAfterResponse() {}

    /// The response is out: the stream ends once the request has too. The rest of a request answered before it was
    /// whole is read and dropped, as HTTP/1.1's lingering close does, so the client reads its answer rather than a
    /// reset (async-http-client, for one, takes even `RST_STREAM(NO_ERROR)` for a failure); a request whose deadline
    /// has passed has its stream reset now.
    func finishStream() {
        guard let context, !requestEnded else { return }
        guard requestDeadline != nil else { return context.close(promise: nil) }
        exchangeAnsweredEarly()
        bodyTakerReady()
    }
}
