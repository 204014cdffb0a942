import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// A wire's handler that runs ``RequestExchange``s: the HTTP/1.1 connection for its current request, an HTTP/2
/// stream for its one. It reports a request's head, body parts and end; this extension routes the head, runs the
/// exchange's actions (the responders, the body's stream or buffer, the refusals) and tells the wire what is
/// left to it: pausing and resuming reading, and closing after the response.
///
/// Called on the wire's event loop only, like the ``ResponseSink`` it is.
protocol RequestExchangeDriver: ResponseSink {
    /// The exchange of the request being read or answered.
    var exchange: RequestExchange { get set }
    /// The cache path's responder, for the context in force.
    var cacheResponder: CacheResponder { get }
    /// Calls `body` with the context in force (a connection may hold it without a reference count).
    func withProxy<Result>(_ body: (ProxyContext) -> Result) -> Result
    /// What routing read of the fields of the wire's last request head, taken again when the next head has the
    /// same (``RepeatedRouteFields``): an HTTP/1.1 connection's, whose parser hands out a repeated head's fields as
    /// it read them. Nil where heads never share their fields (HTTP/2's are decoded anew for every stream).
    var repeatedRouteFields: RepeatedRouteFields? { get }

    /// The body's taker can take no more: stop reading until it can.
    func bodyTakerFull()
    /// The body's taker can take more, or is no longer there to take it: read on.
    func bodyTakerReady()
    /// Nothing more of this request is read: end the wire's request (its connection, or its stream) once the
    /// response is out.
    func closeAfterResponse()
}

extension RequestExchangeDriver {
    // MARK: The request's parts

    /// A request's head arrived: it is routed, and forwarded at once when nothing of its body needs to come
    /// first.
    func exchangeReceivedHead(_ head: HTTPRequestHead) {
        let action = withProxy { proxy in
            let route = proxy.router.route(head, repeating: repeatedRouteFields)
            if let notes = accessNotes {
                notes.platform = route.platform
                if let routes = proxy.routeMetrics, let path = route.path, let platform = route.platform {
                    let series = routes.series(path: path, platform: platform)
                    notes.routeSeries = series
                    // A span is named by its route where one is known (OpenTelemetry's `{method} {http.route}`).
                    if let span = notes.span, span.isRecording, let template = routes.template(ofSeries: series) {
                        span.operationName = "\(head.method.rawValue) \(template)"
                        span.attributes["http.route"] = template
                    }
                }
            }
            return exchange.headReceived(
                head,
                route: route,
                annotate: { proxy.cacheReporting.forwarded($0) },
                streamsBody: { proxy.router.streamsBody(of: $0) }
            )
        }
        switch action {
        case .readBody:
            break
        case .refused(let error, let atOnce):
            withProxy { proxy in
                var metadata: Logger.Metadata = ["uri": "\(head.uri.prefix(200))", "error": "\(error)"]
                if let requestID = accessNotes?.requestID { metadata["request_id"] = .string(requestID) }
                proxy.logger.info("request refused", metadata: metadata)
            }
            if atOnce { refuseNow(error) }
        case .refuseAndClose(let error):
            refuseNow(error)
        case .forward(let forward, let length):
            var body = ForwardedRequestBody.none
            if length != .none {
                let stream = bodyStream(contentLength: length.declared)
                exchange.bodyStreamStarted(stream)
                body = .streamed(stream)
            }
            respond(to: forward, body: body)
        case .buffer(let forward, let sendContinue):
            exchange.bodyBufferStarted(forward, bodyBuffer())
            if sendContinue { writeInterim(status: .continue, headers: [:]) }
        }
    }

    func exchangeReceivedBody(_ part: ByteBuffer) {
        switch exchange.bodyReceived(part) {
        case .none:
            break
        case .stream(let part, let stream):
            if !stream.append(part) { bodyTakerFull() }
        case .buffer(let part, let buffer):
            if !buffer.append(part) { bodyTakerFull() }
        case .failStream(let stream, let error):
            closeAfterResponse()
            stream.fail(error)
        case .refuseAndClose(let error, let buffer):
            buffer?.discard()
            closeAfterResponse()
            write(error)
        }
    }

    func exchangeReceivedEnd() {
        switch exchange.endReceived() {
        case .none:
            break
        case .answerFromCache(let request):
            let responder = cacheResponder
            withProxy { proxy in responder.respond(to: request, proxy: proxy, sink: self) }
        case .answer(let error):
            write(error)
        case .finishStream(let stream):
            stream?.finish()
            // The body is whole: reading, if it was paused while the backend took the body, is not held for what
            // comes after it (the stream's own demand no longer counts once it is let go).
            bodyTakerReady()
        case .forwardBuffered(let forward, let buffer):
            let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
            buffer.finish { result in loopBound.value.forwardBuffered(forward, body: result) }
            bodyTakerReady()
        case .respondToQueuedWrite(let write):
            withProxy { proxy in QueuedWriteResponder().respond(to: write, proxy: proxy, sink: self) }
        case .answerQueueStatus(let id):
            answerQueueStatus(id)
        }
    }

    // MARK: Ending otherwise

    /// Answers with `error` at once, and ends the wire's request after it without reading more.
    func refuseNow(_ error: ProxyError) {
        exchangeAbandoned(because: error)
        closeAfterResponse()
        write(error)
    }

    /// The request ends otherwise than by its end: a body streaming to the backend fails with `error` (its forward
    /// answers, or cuts its answer short; the backend must not take what came as a whole request), and a body
    /// being read whole is let go. Returns whether a forward was streaming the body, and so answers.
    @discardableResult
    func exchangeAbandoned(because error: ProxyError) -> Bool {
        switch exchange.abandon() {
        case .nothing:
            return false
        case .stream(let stream):
            stream.fail(error)
            return true
        case .buffer(let buffer):
            buffer.discard()
            return false
        }
    }

    /// The answer ended before the request's body was whole: the rest of it is dropped.
    func exchangeAnsweredEarly() {
        exchange.answeredEarly()?.discard()
    }

    // MARK: Running the actions

    private func respond(to forward: RequestExchange.Forward, body: ForwardedRequestBody) {
        withProxy { proxy in
            PassThroughResponder().respond(
                to: forward.head,
                target: forward.target,
                platform: forward.platform,
                requestFields: forward.fields,
                annotation: forward.annotation,
                body: body,
                proxy: proxy,
                sink: self
            )
        }
    }

    /// The body of a forwarded request read whole: it goes to the backend now, or the error that kept it from
    /// being buffered answers.
    private func forwardBuffered(
        _ forward: RequestExchange.Forward,
        body result: Result<RequestBodyBuffer.Body, any Error>
    ) {
        switch result {
        case .success(.whole(let buffer)):
            respond(to: forward, body: .whole(buffer))
        case .success(.spooled(let file, let length)):
            respond(to: forward, body: .spooled(file, length: length))
        case .failure(let error):
            let proxyError =
                error as? ProxyError ?? ProxyError(.unavailable, "the request body could not be buffered")
            withProxy { proxy in
                proxy.logger.warning("request body not buffered", metadata: ["error": "\(proxyError)"])
            }
            write(proxyError)
        }
    }

    /// Answers a queued write's public status. Out of line: inlined into ``exchangeReceivedEnd()``, it made every
    /// request's end cost more.
    @inline(never)
    private func answerQueueStatus(_ id: String) {
        withProxy { proxy in QueueStatusResponder().respond(to: id, proxy: proxy, sink: self) }
    }

    /// The stream a forwarded request's body goes into. Reading pauses while the backend cannot take more.
    private func bodyStream(contentLength: Int?) -> RequestBodyStream {
        let stream = RequestBodyStream(eventLoop: eventLoop, contentLength: contentLength)
        stream.setDemandHandler(resumeWhileTaking(ObjectIdentifier(stream)))
        return stream
    }

    /// The buffer a forwarded request's body is read into, whole. Reading pauses while it cannot take more.
    private func bodyBuffer() -> RequestBodyBuffer {
        let buffer = withProxy { proxy in
            RequestBodyBuffer(
                eventLoop: eventLoop,
                memoryLimit: proxy.configuration.limits.requestBufferBytes,
                directory: proxy.requestBufferDirectory,
                threadPool: proxy.threadPool
            )
        }
        buffer.setDemandHandler(resumeWhileTaking(ObjectIdentifier(buffer)))
        return buffer
    }

    /// A taker's demand handler: it resumes reading while the taker is still this exchange's (one let go may not
    /// resume reading for the request after it).
    private func resumeWhileTaking(_ taker: ObjectIdentifier) -> () -> Void {
        let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
        return {
            let driver = loopBound.value
            if driver.exchange.isTakingBody(taker) { driver.bodyTakerReady() }
        }
    }
}
