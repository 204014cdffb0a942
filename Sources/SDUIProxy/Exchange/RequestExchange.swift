import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// One request's exchange on the public listener, from its head to the start of its answer, whatever wire carries
/// it: an HTTP/1.1 connection's current request, or one HTTP/2 stream. Its state is what becomes of the request's
/// body and who answers when its end arrives; it counts the body against its limit. Events go in, actions come
/// out: the wire's handler runs them (``RequestExchangeDriver``), and its framing, keep-alive and flow control
/// stay its own.
///
/// A request goes where the ``RequestRouter`` sent it: GET and HEAD to the cache once the request has been read;
/// other methods forwarded once the body has been read whole (in memory, or a temporary file past
/// `limits.requestBufferBytes`), or at once with the body streamed on a route that says `stream: true`; queued
/// writes once the body has been read whole, up to the route's limit; refusals answered when the request ends, or
/// at once when nothing after the head can be trusted.
///
/// The large payloads are boxed, so that the cache path's value stays a reference and a tag.
struct RequestExchange {
    /// A forwarded request: where it goes, and what its answer tells of the cache.
    struct Forward {
        let head: HTTPRequestHead
        let target: RequestTarget
        let platform: String
        let annotation: CacheAnnotation?
        /// Which of the fields a forward asks about the request has, as the router noted them.
        let fields: RequestFieldPresence
    }

    /// How a request says its body is framed.
    enum BodyLength: Equatable {
        /// It has none.
        case none
        /// It declares this many bytes.
        case declared(Int)
        /// Of a length known only at the end (HTTP/1.1's chunks, or HTTP/2 frames without `content-length`).
        case unknown

        var declared: Int? {
            if case .declared(let length) = self { return length }
            return nil
        }
    }

    enum State {
        /// No request, or one that has been answered or is being answered.
        case idle
        /// The body is dropped; the cache answers at the end.
        case answerFromCache(CacheRequest)
        /// The body is dropped; the error answers at the end.
        indirect case refuse(ProxyError)
        /// Forwarded with the body streamed to the backend (nil when the request has no body); the forward answers.
        case streaming(RequestBodyStream?)
        /// The body is read whole before the request is forwarded.
        indirect case buffering(Forward, RequestBodyBuffer)
        /// The body is held whole, up to `limit`, for the queued write at the end.
        indirect case collectingWrite(QueuedWriteResponder.Write, limit: Int)
        /// The body is dropped; the queued write's public status answers at the end.
        indirect case answerQueueStatus(id: String)
    }

    /// What to do once a head has been routed. The payloads are boxed: the cache path's action is a tag.
    enum HeadAction {
        /// Read on: the request is answered when it is whole.
        case readBody
        /// The router refused the request: log it; answer `error` at once and close when `atOnce` (what follows
        /// cannot be trusted to be a request), else once the request has been read.
        indirect case refused(ProxyError, atOnce: Bool)
        /// Answer `error` at once and close: a body declared past its limit is not read.
        indirect case refuseAndClose(ProxyError)
        /// Forward now, with the body streamed as it arrives; a stream is made for a body of `length`, unless it
        /// has none, and handed back with ``bodyStreamStarted(_:)``.
        indirect case forward(Forward, length: BodyLength)
        /// Read the body whole into a buffer, handed back with ``bodyBufferStarted(_:)``; tell a client that waits
        /// for it to go on (`100 Continue`) when `sendContinue`.
        indirect case buffer(Forward, sendContinue: Bool)
    }

    /// What to do with a part of the body.
    enum BodyAction {
        /// Nothing: it is dropped, or was kept here.
        case none
        /// Hand it to the stream to the backend; pause reading when it cannot take more.
        case stream(ByteBuffer, into: RequestBodyStream)
        /// Hand it to the buffer; pause reading when it cannot take more.
        case buffer(ByteBuffer, into: RequestBodyBuffer)
        /// The body went past its limit while streaming: fail the stream with `error` (the forward answers 413 or
        /// cuts its answer short) and close after the response; the rest is not read.
        case failStream(RequestBodyStream, ProxyError)
        /// The body went past its limit: answer `error` at once and close; a buffer, if any, is let go.
        case refuseAndClose(ProxyError, discarding: RequestBodyBuffer?)
    }

    /// What to do when the request's end has arrived.
    enum EndAction {
        case none
        case answerFromCache(CacheRequest)
        case answer(ProxyError)
        /// The streamed body is whole: end its stream (if it has one) and read on.
        case finishStream(RequestBodyStream?)
        /// The buffered body is whole: forward it once the buffer hands it over, and read on.
        case forwardBuffered(Forward, RequestBodyBuffer)
        case respondToQueuedWrite(QueuedWriteResponder.Write)
        case answerQueueStatus(id: String)
    }

    /// What was taking the body of a request that ends otherwise than by its end: fail the stream (its forward
    /// answers, or cuts its answer short), or let the buffer go (its memory, and its file if it has one).
    enum Abandoned {
        case nothing
        case stream(RequestBodyStream)
        case buffer(RequestBodyBuffer)
    }

    private(set) var state = State.idle
    /// Bytes of the current request's body so far, against ``maxBodyBytes``.
    private var bodyBytes = 0
    /// `limits.maxBodyBytes`, for forwarded bodies.
    var maxBodyBytes: Int

    init(maxBodyBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
    }

    /// A forwarded body past `limits.maxBodyBytes`.
    static let bodyTooLarge = ProxyError(.tooLarge, "the request body exceeds limits.maxBodyBytes")

    // MARK: Events

    /// A request's head arrived and was routed. `annotate` gives what a forward's answer says of the cache,
    /// `streamsBody` whether a forward's route streams uploads; neither is asked on the cache path.
    mutating func headReceived(
        _ head: HTTPRequestHead,
        route: consuming RequestRouter.Route,
        annotate: (CacheResult) -> CacheAnnotation,
        streamsBody: (RequestTarget) -> Bool
    ) -> HeadAction {
        // Reset here, not only at the end: the end of a request answered early is dropped, not handled.
        bodyBytes = 0
        switch consume route {
        case .cache(let request):
            state = .answerFromCache(request)
            return .readBody
        case .forward(let target, let platform, let cacheResult, let fields):
            let forward = Forward(
                head: head,
                target: target,
                platform: platform,
                annotation: cacheResult.map(annotate),
                fields: fields
            )
            let length = Self.bodyLength(of: head, fields: fields)
            // A body is read whole before the backend sees the request, so that a slow client holds no backend
            // connection; unless its route streams uploads.
            if length != .none, !streamsBody(target) {
                // Refused at once when it says it is too large: the backend never sees it.
                if let declared = length.declared, declared > maxBodyBytes {
                    state = .idle
                    return .refuseAndClose(Self.bodyTooLarge)
                }
                state = .idle  // until the buffer is handed back
                return .buffer(forward, sendContinue: Self.expectsContinue(head))
            }
            state = .streaming(nil)
            return .forward(forward, length: length)
        case .queuedWrite(let target, let platform, let route, let limit):
            let write = QueuedWriteResponder.Write(
                head: head,
                target: target,
                platform: platform,
                route: route,
                body: ByteBuffer()
            )
            state = .collectingWrite(write, limit: limit)
            return .readBody
        case .refuse(let error, let closeConnection):
            state = closeConnection ? .idle : .refuse(error)
            return .refused(error, atOnce: closeConnection)
        case .queueStatus(let id):
            state = .answerQueueStatus(id: id)
            return .readBody
        }
    }

    /// The stream made for a ``HeadAction/forward(_:length:)``'s body.
    mutating func bodyStreamStarted(_ stream: RequestBodyStream) {
        state = .streaming(stream)
    }

    /// The buffer made for a ``HeadAction/buffer(_:sendContinue:)``.
    mutating func bodyBufferStarted(_ forward: Forward, _ buffer: RequestBodyBuffer) {
        state = .buffering(forward, buffer)
    }

    mutating func bodyReceived(_ part: ByteBuffer) -> BodyAction {
        switch state {
        case .streaming(let stream?):
            bodyBytes += part.readableBytes
            guard bodyBytes <= maxBodyBytes else {
                state = .idle
                return .failStream(stream, Self.bodyTooLarge)
            }
            return .stream(part, into: stream)
        case .buffering(_, let buffer):
            bodyBytes += part.readableBytes
            guard bodyBytes <= maxBodyBytes else {
                state = .idle
                return .refuseAndClose(Self.bodyTooLarge, discarding: buffer)
            }
            return .buffer(part, into: buffer)
        case .collectingWrite(var write, let limit):
            guard write.body.readableBytes + part.readableBytes <= limit else {
                state = .idle
                return .refuseAndClose(RequestRouter.queuedBodyTooLarge(limit: limit), discarding: nil)
            }
            state = .idle  // keeps the buffer uniquely referenced while it grows
            var part = part
            write.body.writeBuffer(&part)
            state = .collectingWrite(write, limit: limit)
            return .none
        case .idle, .answerFromCache, .refuse, .streaming(nil), .answerQueueStatus:
            return .none
        }
    }

    mutating func endReceived() -> EndAction {
        // Moved out, not copied: a copy would retain the request it holds.
        var current = State.idle
        swap(&current, &state)
        bodyBytes = 0
        switch consume current {
        case .idle: return .none
        case .answerFromCache(let request): return .answerFromCache(request)
        case .refuse(let error): return .answer(error)
        case .streaming(let stream): return .finishStream(stream)
        case .buffering(let forward, let buffer): return .forwardBuffered(forward, buffer)
        case .collectingWrite(let write, _): return .respondToQueuedWrite(write)
        case .answerQueueStatus(let id): return .answerQueueStatus(id: id)
        }
    }

    /// The request ends otherwise than by its end (a refusal, a timeout, the client gone): what still takes its
    /// body is handed back to be failed or let go.
    mutating func abandon() -> Abandoned {
        defer { state = .idle }
        switch state {
        case .streaming(let stream?): return .stream(stream)
        case .buffering(_, let buffer): return .buffer(buffer)
        default: return .nothing
        }
    }

    /// The answer ended before the body was whole: the rest is dropped. A buffer is let go; a stream is left to
    /// the forward that answered.
    mutating func answeredEarly() -> RequestBodyBuffer? {
        defer { state = .idle }
        if case .buffering(_, let buffer) = state { return buffer }
        return nil
    }

    // MARK: Questions

    /// Whether the body is streaming to the backend (so an interruption is answered by the forward).
    var isStreamingBody: Bool {
        if case .streaming(_?) = state { return true }
        return false
    }

    /// Whether `taker` (a stream or a buffer) still takes this exchange's body: one let go may not resume reading
    /// for the request after it.
    func isTakingBody(_ taker: ObjectIdentifier) -> Bool {
        switch state {
        case .streaming(let stream?): ObjectIdentifier(stream) == taker
        case .buffering(_, let buffer): ObjectIdentifier(buffer) == taker
        default: false
        }
    }

    // MARK: Rules

    /// How `head` frames its body. `fields`, what the router noted of the head (nil: not noted), says whether it
    /// has a framing field at all: most requests have neither, and are not searched for them.
    static func bodyLength(of head: HTTPRequestHead, fields: RequestFieldPresence? = nil) -> BodyLength {
        assert(fields?.cover(head.headers) ?? true, "the fields noted are not those of the head")
        if let fields, fields.isDisjoint(with: [.contentLength, .transferEncoding]) { return .none }
        if head.headers[canonicalForm: "transfer-encoding"].contains(where: { $0.lowercased() == "chunked" }) {
            return .unknown
        }
        // (An HTTP/2 stream's head says `chunked` too when a body of no declared length follows it: the codec
        // in front of the stream handler adds it.)
        // The first member of the first field: a length repeated in a list (`5, 5`), which admission and HTTP/2's
        // framing accept when the members agree, is that length, not a number that fails to parse.
        guard let length = head.headers[canonicalForm: "content-length"].first.flatMap({ Int($0) }), length > 0
        else {
            return .none
        }
        return .declared(length)
    }

    /// A client that waits for `100 Continue` is told to go on by the proxy itself: the backend will see nothing
    /// before the body is in.
    static func expectsContinue(_ head: HTTPRequestHead) -> Bool {
        (head.version.major > 1 || head.version.minor >= 1)
            && head.headers[canonicalForm: "expect"].contains(where: { $0.lowercased() == "100-continue" })
    }
}
