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
/// - Framing, keep-alive and the stream's life are the connection's (`NIOHTTP2Handler`, ``HTTP2Connection``, which
///   hands the stream its frames and writes the stream's). The stream reads and writes frame payloads itself, with
///   no HTTP/1 codec between: the head it routes is ``HTTP2RequestHead``'s reading of the HEADERS frame
///   (`:authority` is `Host`, the version 2.0), and a response's fields go into the HPACK block as they are
///   produced (a stored entry's from its stored lines), not through an HTTP/1 head converted again.
/// - While the body's taker is full, the stream holds the DATA that arrives and gives none of its window back; the
///   client stops once the window is spent. Parts go on as the taker takes them, and the window comes back with them.
/// - A request has `limits.requestTimeout` to arrive whole from the stream's opening; then it is answered 408 and the
///   stream is reset. The connection's idle limit is ``HTTP2Connection``'s.
/// - A response cut short resets the stream; a response that ends before the request did drops the rest of its body
///   until the request deadline, then resets the stream. The client's connection and its other streams go on.
///
/// Responders write to it as their ``ResponseSink`` (``HTTP2Stream+ResponseSink.swift``).
final class HTTP2Stream: RequestExchangeDriver {
    let id: HTTP2StreamID
    /// The connection the stream's frames come from and go to.
    let connection: HTTP2Connection
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
    /// The request is whole, or no more of it is wanted (refused, malformed).
    var requestEnded = false
    /// The client's END_STREAM arrived.
    private var clientEnded = false
    /// The response's END_STREAM went out.
    var sentEnd = false
    /// Nothing has ended the stream: the connection has not reported it closed (both ends done, or a reset by the
    /// client) nor closed itself, and this side has not reset it.
    private(set) var isOpen = true
    /// The body's taker is full: DATA that arrives is held, its window not given back.
    private var takerFull = false
    /// Parts held while the taker was full, with their flow-controlled lengths, and whether END_STREAM came after.
    private var heldParts: [(part: ByteBuffer, length: Int)] = []
    private var heldEnd = false
    /// The stream's window, given back as its parts are taken.
    private var window = HTTP2InboundWindow()
    /// Fires `limits.requestTimeout` after the stream opened, unless the request arrived whole.
    private var requestDeadline: Scheduled<Void>?
    var peer: ClientPeer?
    /// None: a stream's head is decoded anew, so it never shares another's fields.
    var repeatedRouteFields: RepeatedRouteFields? { nil }
    let isSecure: Bool
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

    init(
        id: HTTP2StreamID,
        connection: HTTP2Connection,
        runtime: ProxyRuntime,
        requests: RequestTally,
        isSecure: Bool
    ) {
        let proxy = runtime.context
        self.id = id
        self.connection = connection
        self.proxy = proxy
        self.cacheResponder = CacheResponder(proxy.configuration)
        self.exchange = RequestExchange(maxBodyBytes: proxy.configuration.limits.maxBodyBytes)
        self.requests = requests
        self.isSecure = isSecure
        self.loop = connection.eventLoop
        requests.countStreamOpened()
    }

    func withProxy<Result>(_ body: (ProxyContext) -> Result) -> Result {
        body(proxy)
    }

    // MARK: Frames from the connection

    /// A HEADERS frame: the request's head, or its trailers.
    func received(_ headers: HTTP2Frame.FramePayload.Headers) {
        if headers.endStream { clientEnded = true }
        // Trailers, after the head, are checked and dropped: the backend is sent none.
        guard !headArrived else {
            if let violation = HTTP2RequestHead.violation(inTrailers: headers.headers) {
                return resetMalformed(violation)
            }
            if headers.endStream { clientFinished() }
            return
        }
        headArrived = true
        if !headers.endStream { startRequestDeadline() }
        let head: HTTPRequestHead
        switch HTTP2RequestHead.make(headers.headers, endStream: headers.endStream) {
        case .success(let made): head = made
        case .failure(.malformed(let violation)):
            return resetMalformed(violation)
        case .failure(.refused(let error)):
            requestEnded = true
            return refuse(error)
        }
        isHeadRequest = head.method.isHEAD
        accounting = RequestAccounting(proxy: proxy, head: head, clientAddress: client.address, clock: loop)
        guard headers.endStream else {
            // A body follows: routed now, so that it has somewhere to go.
            return exchangeReceivedHead(head)
        }
        requestArrivedWhole(head: head)
    }

    /// A DATA frame, `length` bytes of the stream's window.
    func received(_ data: HTTP2Frame.FramePayload.Data, flowControlledLength length: Int) {
        if data.endStream { clientEnded = true }
        let part: ByteBuffer
        if case .byteBuffer(let buffer) = data.data { part = buffer } else { part = ByteBuffer() }
        if takerFull || !heldParts.isEmpty {
            heldParts.append((part, length))
        } else {
            take(part, length: length)
        }
        if data.endStream { clientFinished() }
    }

    /// A part is given to the exchange, and its window back to the client while it has more to send.
    private func take(_ part: ByteBuffer, length: Int) {
        if part.readableBytes > 0 { exchangeReceivedBody(part) }
        if let increment = window.took(length), !clientEnded, isOpen { connection.giveBack(increment, on: id) }
    }

    /// The client's END_STREAM arrived after a body (on its last DATA frame, or on trailers): the request is whole
    /// once the parts held before it are taken.
    private func clientFinished() {
        guard !takerFull, heldParts.isEmpty else {
            heldEnd = true
            return
        }
        requestArrivedWhole()
    }

    /// The connection reports the stream closed (both ends done, or reset either way), or is closing: a body
    /// streaming to the backend fails, one read whole is let go, a response under way is counted as far as it went.
    func closed() {
        end(because: ProxyError(.network, "the client reset the stream"))
    }

    /// Nothing more goes out on the stream, and nothing it asked for goes on.
    private func end(because error: ProxyError) {
        guard isOpen else { return }
        isOpen = false
        requestDeadline?.cancel()
        requestDeadline = nil
        heldParts.removeAll()
        exchangeAbandoned(because: error)
        if !response.ended, response.headWritten { abandonResponse() }
    }

    /// Starts `limits.requestTimeout` for a request whose body follows its head. The stream opened with the
    /// HEADERS frame just read, so the time runs from its opening; a request whole in its HEADERS frame (almost
    /// every GET) needs no deadline, and schedules none.
    private func startRequestDeadline() {
        let loopBound = NIOLoopBound(self, eventLoop: loop)
        requestDeadline = loop.scheduleTask(in: proxy.configuration.limits.requestTimeout.timeAmount) {
            loopBound.value.requestTimedOut()
        }
    }

    /// The client's END_STREAM arrived (with the head, when `head` is given): the request is routed and answered on
    /// the loop's next turn, once the frames read with it are handled. A client that opens streams and resets them
    /// at once (rapid reset) has its reset handled first: its request reaches no responder, and neither a fill nor
    /// a forward starts.
    private func requestArrivedWhole(head: HTTPRequestHead? = nil) {
        requestEnded = true
        requestDeadline?.cancel()
        requestDeadline = nil
        let loopBound = NIOLoopBound(self, eventLoop: loop)
        loop.execute {
            let stream = loopBound.value
            guard stream.isOpen else {
                _ = stream.exchange.abandon()
                return
            }
            if let head { stream.exchangeReceivedHead(head) }
            stream.exchangeReceivedEnd()
        }
    }

    /// Answers `error` for a request that cannot be routed, and resets the stream after it.
    private func refuse(_ error: ProxyError) {
        proxy.logger.info("HTTP/2 request refused", metadata: ["error": "\(error)"])
        write(error)
        reset()
    }

    /// A malformed request (RFC 9113 section 8.1.1) is a stream error: the stream is reset with PROTOCOL_ERROR,
    /// unanswered; the connection and its other streams go on. A body already streaming to the backend fails.
    private func resetMalformed(_ violation: HTTP2RequestFieldRules.Violation) {
        proxy.logger.info(
            "HTTP/2 stream reset: malformed request",
            metadata: ["client": "\(client.address ?? "?")", "reason": "\(violation)"]
        )
        requestEnded = true
        requestDeadline?.cancel()
        requestDeadline = nil
        exchangeAbandoned(because: ProxyError(.badRequest, "malformed HTTP/2 request: \(violation)"))
        abandonResponse()
        reset(.protocolError)
    }

    /// swift-nio-http2 refused one of the stream's frames: the stream is reset whatever was sent, and ends here.
    func failed() {
        guard isOpen else { return }
        sendReset(.internalError, because: ProxyError(.network, "the HTTP/2 stream failed"))
    }

    /// Resets the stream unless both ends sent END_STREAM already (then the connection has closed it, or is about
    /// to).
    ///
    /// The stream ends here as the RST_STREAM is written, not when the connection reports it closed: while the
    /// channel is full, `NIOHTTP2Handler` holds the RST_STREAM, and a WINDOW_UPDATE written behind it for DATA still
    /// arriving would name a stream closed by the time it goes out, an error swift-nio-http2 reports as the
    /// connection's.
    func reset(_ code: HTTP2ErrorCode = .cancel) {
        guard isOpen, !(clientEnded && sentEnd) else { return }
        sendReset(code, because: ProxyError(.network, "the stream was reset"))
    }

    private func sendReset(_ code: HTTP2ErrorCode, because error: ProxyError) {
        connection.write(.rstStream(code), on: id, promise: nil)
        connection.flush()
        end(because: error)
    }

    /// The request did not arrive whole in time. Its stream is reset once what answers it is out: the 408, or what
    /// the forward that streamed its body answers; one answered already is reset now.
    private func requestTimedOut() {
        requestDeadline = nil
        guard isOpen, !requestEnded else { return }
        guard !response.headWritten else { return reset() }
        var metadata: Logger.Metadata = ["client": "\(client.address ?? "?")", "protocol": "h2"]
        if let requestID = accessNotes?.requestID { metadata["request_id"] = .string(requestID) }
        proxy.logger.info("request timed out while being read", metadata: metadata)
        let error = ProxyError(.requestTimeout, "the request was not complete within limits.requestTimeout")
        // A body streaming to the backend fails with it: its forward answers, or cuts its answer short.
        if exchangeAbandoned(because: error) { return }
        write(error)
    }

    // MARK: What the exchange leaves to the stream

    func bodyTakerFull() {
        takerFull = true
    }

    func bodyTakerReady() {
        guard takerFull else { return }
        takerFull = false
        // The parts held meanwhile go on, until the taker is full again.
        while !takerFull, !heldParts.isEmpty {
            let (part, length) = heldParts.removeFirst()
            take(part, length: length)
        }
        if heldParts.isEmpty, heldEnd {
            heldEnd = false
            requestArrivedWhole()
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
        guard isOpen, !requestEnded else { return }
        guard requestDeadline != nil else { return reset() }
        exchangeAnsweredEarly()
        bodyTakerReady()
    }
}
