import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// A request to the backend, as the proxy built it.
public struct UpstreamRequest: Sendable {
    public var method: HTTPMethod
    /// The request target relative to the backend's base (`/screens/home?x=1`), already normalised.
    public var target: String
    /// The header fields as the proxy built them, as bytes: each line copied to the wire as it lies, but for
    /// `Host` and the framing, which the client writes for its own hop.
    public var fields: HTTPFieldLines
    /// A body held in memory (queued writes and their deliveries), sent with the request; a body streamed from a
    /// client goes to ``NetworkClient/forward(_:body:on:to:)`` as a ``RequestBodyStream`` instead.
    public var body: ByteBuffer?
    /// Where interim (1xx) responses to a cache fill go as they arrive: the client the fill is for (a forwarded
    /// request's go to its ``ForwardedResponseSink``). A client that reads no backend (a directory) ignores it.
    var interim: InterimRelay?
    /// Whether a request sent with ``NetworkClient/forward(_:body:on:to:)`` is a cache miss streamed to its
    /// clients (too large to store): it takes its backend connection as a fill does, not from the forwards' share
    /// (`upstream.maxForwardConnections`). Requests sent with `fetch` are always fills.
    var fillsCache = false

    public init(method: HTTPMethod, target: String, fields: HTTPFieldLines, body: ByteBuffer? = nil) {
        self.method = method
        self.target = target
        self.fields = fields
        self.body = body
    }

    /// A cache fill's request, whose interim responses go to `interim`.
    init(method: HTTPMethod, target: String, fields: HTTPFieldLines, interim: InterimRelay?) {
        // Each property set here: delegating to the other initializer copied the request and destroyed the copy.
        self.method = method
        self.target = target
        self.fields = fields
        self.body = nil
        self.interim = interim
    }

    public init(method: HTTPMethod, target: String, headers: HTTPHeaders, body: ByteBuffer? = nil) {
        self.init(method: method, target: target, fields: HTTPFieldLines(headers), body: body)
    }

    /// The header fields as a collection, made when asked for: for the paths that keep a request (the write
    /// queue) or read it whole.
    public var headers: HTTPHeaders { fields.headers }
}

/// Passes a backend's interim responses (100 Continue, 103 Early Hints) to the client a request is for, as
/// they arrive: on the client's loop, which is the exchange's.
struct InterimRelay: Sendable {
    let sink: NIOLoopBound<any ResponseSink>

    /// Whether a client speaking `version` may be sent interim responses: never an HTTP/1.0 one (RFC 9110
    /// section 15.2).
    static func reaches(_ version: HTTPVersion) -> Bool {
        version.major > 1 || version.minor >= 1
    }

    func relay(_ head: HTTPResponseParser.Head) {
        sink.value.writeInterim(status: head.status, headers: head.headers)
    }
}

/// A whole backend response, read into memory.
public struct UpstreamResponse: Sendable {
    public var status: HTTPResponseStatus
    /// The header fields as the backend sent them: a cache fill reads them in place.
    public var fields: HTTPFieldLines
    public var body: ByteBuffer

    /// The header fields as a collection, made when asked for: for the answers a cache fill does not store.
    public var headers: HTTPHeaders { fields.headers }

    public init(status: HTTPResponseStatus, fields: HTTPFieldLines, body: ByteBuffer) {
        self.status = status
        self.fields = fields
        self.body = body
    }

    public init(status: HTTPResponseStatus, headers: HTTPHeaders, body: ByteBuffer) {
        self.init(status: status, fields: HTTPFieldLines(headers), body: body)
    }
}

/// Receives a forwarded response as it streams in from the backend.
///
/// Every call happens on the event loop given to ``NetworkClient/forward(_:body:on:to:)``.
public protocol ForwardedResponseSink: Sendable {
    /// An interim (1xx) response ahead of the final one, as it arrived; the default lets it go.
    func receiveInterim(status: HTTPResponseStatus, headers: HTTPHeaders)
    /// The response head; body parts follow.
    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders)
    /// The response head as the backend's field lines, read in place, and its body's length when its framing
    /// declares one (`Content-Length`); the default makes the lines a collection.
    func receiveHead(status: HTTPResponseStatus, fields: HTTPFieldLines, bodyLength: Int?)
    /// A part of the body; the returned future completes when the client can take more (backpressure).
    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void>
    /// The response is complete.
    func receiveEnd()
}

extension ForwardedResponseSink {
    public func receiveInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {}

    public func receiveHead(status: HTTPResponseStatus, fields: HTTPFieldLines, bodyLength: Int?) {
        receiveHead(status: status, headers: fields.headers)
    }
}

/// How the proxy talks to the component backend (the seed's `NetworkClient`).
///
/// Implementations map their failures to ``ProxyError`` with kind `network`, `timeout` or `url`, so the
/// rest of the proxy deals in one error model.
public protocol NetworkClient: Sendable {
    /// Sends `request` and reads the whole response, up to `maxBodyBytes` of body.
    func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop
    )
        -> EventLoopFuture<UpstreamResponse>

    /// ``fetch(_:maxBodyBytes:on:)`` with the outcome handed to `completion`, on `eventLoop`, instead of a
    /// future: the miss path's form. A client that completes exchanges from its own callbacks saves a promise
    /// and a future per exchange; the default waits on the future.
    func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    )

    /// ``fetch(_:maxBodyBytes:on:completion:)`` for a cache fill: the body's bytes are taken from `budget` while
    /// they are held, and a response they would not fit in fails with ``ProxyError`` kind `fillBudgetFull`,
    /// as one over `maxBodyBytes` does, so the caller streams it instead. The default holds the body without a
    /// budget.
    func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        budget: ByteBudget,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    )

    /// Sends `request` with a body streamed from `body` (nil for none), and streams the response into `sink`.
    /// The future completes after ``ForwardedResponseSink/receiveEnd()``, or fails with a ``ProxyError``;
    /// when it fails after the head was delivered, the client's response is cut short.
    func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink
    ) -> EventLoopFuture<Void>

    /// ``forward(_:body:on:to:)`` with a completion instead of a future, called once on `eventLoop`, for the
    /// pass-through path, where the future and its callbacks are a cost on every request.
    func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    )

    /// Whether ``forward(_:body:on:to:)`` streams the response as it comes, holding only a part at a time. A
    /// client that reads it whole (a directory) is not asked to stream what was too large to hold.
    var streamsResponses: Bool { get }

    /// Releases connections and pending work.
    func shutdown() async throws
}

extension NetworkClient {
    public var streamsResponses: Bool { true }

    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        fetch(request, maxBodyBytes: maxBodyBytes, on: eventLoop).hop(to: eventLoop).whenComplete(completion)
    }

    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        budget: ByteBudget,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        fetch(request, maxBodyBytes: maxBodyBytes, on: eventLoop, completion: completion)
    }

    public func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        forward(request, body: body, on: eventLoop, to: sink).hop(to: eventLoop).whenComplete(completion)
    }
}
