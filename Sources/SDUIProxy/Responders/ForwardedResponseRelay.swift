import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Passes a backend's response to a ``ResponseSink`` as it streams in: end-to-end headers only, with the cache's
/// annotation (`Cache-Status`, `X-Cache`) when the request was on the cache path. `receivedHead` sees the backend's
/// head first (invalidation); a ``PostAnswerKeeper`` is handed a copy of what passes.
///
/// The network client calls it on the sink's loop, and only there is its state read or changed: `@unchecked
/// Sendable` for that state, checked in debug builds. Its own, not in a loop-bound box: a box was a second object
/// made and freed for every forwarded request.
final class ForwardedResponseRelay: ForwardedResponseSink, @unchecked Sendable {
    /// How far the response has come.
    enum Progress {
        case waitingForHead
        case streaming
        case ended
    }

    private let sink: any ResponseSink
    private var currentProgress = Progress.waitingForHead
    private var annotation: CacheAnnotation?
    private let takesInterim: Bool
    /// When the backend was asked, for the access line (nil without one): its answer's end is the backend's time.
    private let asked: NIODeadline?
    /// Keeps a copy of a `POST`'s answer that may answer later `GET`s of its target.
    private let keeper: PostAnswerKeeper?
    /// What the client sees changed in the backend's fields (`Vary`, the tag field).
    private let clientFields: ClientFacingFields
    /// Sees the backend's head first (an unsafe method's invalidation); nil for none.
    private let receivedHead: (@Sendable (HTTPResponseStatus, HTTPHeaders) -> Void)?
    /// The id of the request, returned to the client in `X-Request-Id`; nil to leave the backend's field as it is.
    private let requestID: String?

    /// - Parameter takesInterim: whether the client may be sent the backend's interim responses.
    init(
        to sink: any ResponseSink,
        annotation: CacheAnnotation?,
        takesInterim: Bool,
        clientFields: ClientFacingFields = ClientFacingFields(),
        requestID: String? = nil,
        keeper: PostAnswerKeeper? = nil,
        receivedHead: (@Sendable (HTTPResponseStatus, HTTPHeaders) -> Void)? = nil
    ) {
        self.sink = sink
        self.annotation = annotation
        self.takesInterim = takesInterim
        self.asked = sink.accessNotes?.clock.now
        self.keeper = keeper
        self.requestID = requestID
        self.clientFields = clientFields
        self.receivedHead = receivedHead
    }

    /// How far the response has come; read on the sink's loop.
    var progress: Progress {
        assert(sink.eventLoop.inEventLoop)
        return currentProgress
    }

    /// Answers the client of a forward that failed, as far as its response got: the error before the backend's
    /// head; after it, the response cut short (the only honest signal left); nothing once it ended. On the sink's
    /// loop.
    func fail(with error: ProxyError) {
        assert(sink.eventLoop.inEventLoop)
        switch currentProgress {
        case .waitingForHead: sink.write(error, annotation: annotation)
        case .streaming: sink.abort()
        case .ended: break
        }
    }

    /// The response is another request's exchange, shared: its `Cache-Status` says `collapsed`. On the sink's
    /// loop, before the head.
    func markCollapsed() {
        assert(sink.eventLoop.inEventLoop)
        annotation?.status.collapsed = true
    }

    func receiveInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {
        assert(sink.eventLoop.inEventLoop)
        guard takesInterim, currentProgress == .waitingForHead else { return }
        sink.writeInterim(status: status, headers: headers)
    }

    func receiveHead(status: HTTPResponseStatus, fields: HTTPFieldLines, bodyLength: Int?) {
        // An answer this hop only filters and adds its own fields to goes out from the backend's bytes; one that
        // is read as a collection (to invalidate, to keep, to merge `Vary`) takes the collection's path.
        assert(sink.eventLoop.inEventLoop)
        guard receivedHead == nil, keeper == nil, clientFields.keyFields.isEmpty else {
            return receiveHead(status: status, headers: fields.headers)
        }
        // Said in place: the annotation is the relay's to tell once, and a copy of it changed cost a value
        // witness's copy and destroy of every field (about 300 instructions a forward).
        annotation?.status.forwardStatus = status.code
        currentProgress = .streaming
        sink.writeHead(
            RelayedResponseHead(
                status: status,
                fields: fields,
                bodyLength: bodyLength,
                clientFields: clientFields,
                requestID: requestID,
                annotation: annotation
            ),
            cacheResult: annotation?.result
        )
    }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        assert(sink.eventLoop.inEventLoop)
        receivedHead?(status, headers)
        keeper?.head(status: status, headers: headers)
        // The hidden tag field and the backend's id go in the filtering pass; only key fields' Vary is merged after.
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(
            headers,
            dropping: clientFields.hiddenField,
            replaced: requestID == nil ? nil : "x-request-id"
        )
        if !clientFields.keyFields.isEmpty { clientFields.apply(to: &headers) }
        headers.add(name: "Via", value: CachedResponse.ownVia)
        if let requestID { headers.add(name: "X-Request-Id", value: requestID) }
        annotation?.status.forwardStatus = status.code
        annotation?.add(to: &headers)
        currentProgress = .streaming
        sink.writeHead(status: status, headers: headers, cacheResult: annotation?.result)
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        assert(sink.eventLoop.inEventLoop)
        keeper?.bodyPart(buffer)
        return sink.writeBodyPart(buffer)
    }

    func receiveEnd() {
        assert(sink.eventLoop.inEventLoop)
        currentProgress = .ended
        if let asked { sink.accessNotes?.upstreamAnswered(since: asked) }
        sink.writeEnd()
        // After the client's answer: storing the copy (validating a component, compressing it) does not delay it.
        keeper?.end()
    }
}
