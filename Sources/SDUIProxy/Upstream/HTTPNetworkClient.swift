import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore

/// The ``NetworkClient`` for a backend reached over HTTP(S), built on AsyncHTTPClient: pooled keep-alive
/// connections on the caller's event loop, a connect timeout, a deadline for the response head and a read
/// timeout for each silence of the body, no redirects followed (they are passed to the client) and no decompression (bodies pass as the backend encoded them).
public final class HTTPNetworkClient: NetworkClient {
    private let client: HTTPClient
    private let origin: UpstreamOrigin.HTTPOrigin
    private let timeout: TimeAmount
    private let bodyIdleTimeout: TimeAmount

    public init(
        origin: UpstreamOrigin.HTTPOrigin,
        configuration: ProxyConfiguration.Upstream,
        eventLoopGroup: any EventLoopGroup
    ) {
        self.origin = origin
        self.timeout = configuration.timeout.timeAmount
        self.bodyIdleTimeout = configuration.bodyIdleTimeout.timeAmount
        var clientConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            // No read timeout: it would run while a forwarded body is still uploading, and before the head;
            // ``ExchangeDeadlines`` bounds the head and each silence of the body instead.
            timeout: .init(connect: configuration.connectTimeout.timeAmount),
            decompression: .disabled
        )
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = configuration.maxConnections
        // A backend that refuses the connection fails the request at once, as it does on the cache-fill path, rather
        // than after `upstream.connectTimeout` of retries: a queued write is accepted (202) without that wait, and a
        // pass-through request answered 502 at once. The write queue and the clients retry; a proxy should not.
        clientConfiguration.connectionPool.retryConnectionEstablishment = false
        clientConfiguration.httpVersion = .http1Only
        self.client = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: clientConfiguration)
    }

    private func makeRequest(
        _ request: UpstreamRequest,
        body: HTTPClient.Body?
    ) throws(ProxyError) -> HTTPClient.Request {
        let url = origin.origin + origin.basePath + request.target
        do {
            return try HTTPClient.Request(url: url, method: request.method, headers: request.headers, body: body)
        } catch {
            throw ProxyError(.url, "cannot build an upstream URL from \(request.target)")
        }
    }

    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<UpstreamResponse> {
        fetch(request, maxBodyBytes: maxBodyBytes, budget: nil, on: eventLoop)
    }

    /// The body's bytes are taken from `budget` while the response is read (``BudgetedResponseAccumulator``).
    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        budget: ByteBudget,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        fetch(request, maxBodyBytes: maxBodyBytes, budget: .some(budget), on: eventLoop).hop(to: eventLoop)
            .whenComplete(completion)
    }

    private func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        budget: ByteBudget?,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<UpstreamResponse> {
        let clientRequest: HTTPClient.Request
        do {
            clientRequest = try makeRequest(request, body: request.body.map { .byteBuffer($0) })
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        let deadline = ExchangeDeadlines(headTimeout: timeout, bodyIdleTimeout: bodyIdleTimeout, eventLoop: eventLoop)
        let accumulator = BudgetedResponseAccumulator(request: clientRequest, maxBodySize: maxBodyBytes, budget: budget)
        accumulator.deadlines = deadline
        let task = client.execute(request: clientRequest, delegate: accumulator, eventLoop: .delegate(on: eventLoop))
        deadline.watch(task)
        deadline.start()
        return task.futureResult.hop(to: eventLoop).flatMapErrorThrowing { error in
            if let expired = deadline.error { throw expired }
            throw Self.proxyError(for: error, maxBodyBytes: maxBodyBytes)
        }.map { response in
            UpstreamResponse(
                status: response.status,
                headers: response.headers,
                body: response.body ?? ByteBuffer()
            )
        }
    }

    public func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink
    ) -> EventLoopFuture<Void> {
        // With a body, the backend's time starts once the whole request has arrived: the upload is the client's
        // time, bounded by limits.requestTimeout, which fails the stream and so aborts this request (never ends it
        // short). A backend that stops reading the body is within its own time. Without a body, the deadline
        // runs from now. Either way it ends with the response head: a long body streams for as long as it keeps
        // coming.
        let deadline = ExchangeDeadlines(
            headTimeout: timeout,
            bodyIdleTimeout: bodyIdleTimeout,
            eventLoop: body?.eventLoop ?? eventLoop
        )
        // A body in memory (a queued write) goes as it is when none is streamed.
        let clientBody =
            body.map { stream in
                HTTPClient.Body.stream(contentLength: stream.contentLength.map(Int64.init)) { writer in
                    stream.drain { part in writer.write(.byteBuffer(part)) }
                }
            } ?? request.body.map { .byteBuffer($0) }
        let clientRequest: HTTPClient.Request
        do {
            clientRequest = try makeRequest(request, body: clientBody)
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        let task = client.execute(
            request: clientRequest,
            delegate: ForwardingDelegate(sink: sink, deadlines: deadline),
            eventLoop: .delegate(on: eventLoop)
        )
        deadline.watch(task)
        if body == nil { deadline.start() }
        if let body {
            let start: @Sendable () -> Void = { deadline.start() }
            if body.eventLoop.inEventLoop {
                body.setFinishHandler(start)
            } else {
                body.eventLoop.execute { body.setFinishHandler(start) }
            }
        }
        return task.futureResult.flatMapErrorThrowing { error in
            if let expired = deadline.error { throw expired }
            throw Self.proxyError(for: error, maxBodyBytes: nil)
        }
    }

    public func shutdown() async throws {
        try await client.shutdown()
    }

    /// Maps AsyncHTTPClient and NIO failures onto the error model.
    static func proxyError(for error: any Error, maxBodyBytes: Int?) -> ProxyError {
        if let error = error as? ProxyError { return error }
        if error is ResponseAccumulator.ResponseTooBigError {
            return ProxyError(.upstreamTooLarge, "the backend's response is larger than \(maxBodyBytes ?? 0) bytes")
        }
        if let error = error as? BudgetedResponseAccumulator.OverBudget {
            return ProxyError(
                .fillBudgetFull,
                "cache fills already hold what upstream.maxBufferedBytes allows (\(error.limit) bytes)"
            )
        }
        if let error = error as? HTTPClientError {
            switch error {
            case .readTimeout, .writeTimeout, .deadlineExceeded:
                return ProxyError(.timeout, "the backend did not answer in time")
            case .connectTimeout, .getConnectionFromPoolTimeout:
                return ProxyError(.timeout, "connecting to the backend timed out")
            case .invalidURL, .emptyHost, .emptyScheme:
                return ProxyError(.url, "cannot build an upstream URL", detail: "\(error)")
            case .remoteConnectionClosed:
                return ProxyError(.network, "the backend closed the connection", detail: "\(error)")
            default:
                return ProxyError(.network, "the backend connection failed", detail: "\(error)")
            }
        }
        if error is NIOConnectionError || error is ChannelError || error is IOError {
            return ProxyError(
                .network,
                "cannot reach the backend: \(UpstreamFailureReason.reason(for: error))",
                detail: "\(error)"
            )
        }
        return ProxyError(.network, "the backend exchange failed", detail: "\(error)")
    }
}

/// Streams an AsyncHTTPClient response into a ``ForwardedResponseSink``, one part at a time.
private final class ForwardingDelegate: HTTPClientResponseDelegate {
    typealias Response = Void

    private let sink: any ForwardedResponseSink
    private let deadlines: ExchangeDeadlines

    init(sink: any ForwardedResponseSink, deadlines: ExchangeDeadlines) {
        self.sink = sink
        self.deadlines = deadlines
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        // An interim 1xx head is not the answer: the head's deadline holds until the final one.
        if head.status.code >= 200 { deadlines.headArrived() }
        sink.receiveHead(status: head.status, headers: head.headers)
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let taken = sink.receiveBodyPart(buffer)
        deadlines.bodyPartArrived(untilTaken: taken)
        return taken
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        sink.receiveEnd()
    }
}
