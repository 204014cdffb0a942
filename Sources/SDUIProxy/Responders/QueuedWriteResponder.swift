import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Answers a write on a queued route: it is forwarded at once, and when the backend cannot take it now
/// (unreachable, timed out, or a retryable status) it is stored durably and the client gets 202 with where to
/// follow it. On a sequential route with requests waiting it is queued behind them instead
/// (``WriteQueue/admitWrite(on:eventLoop:_:)``).
struct QueuedWriteResponder {
    /// A write whose body has been read whole.
    struct Write {
        var head: HTTPRequestHead
        var target: RequestTarget
        var platform: String
        var route: QueueConfiguration.Route
        var body: ByteBuffer
    }

    func respond(to write: Write, proxy: ProxyContext, sink: any ResponseSink) {
        guard let queue = proxy.writeQueue else {
            sink.write(ProxyError(.internalError, "a queued route without a write queue"))
            return
        }
        let id = WriteQueue.newID()
        let peer = sink.client
        var headers = proxy.requestBuilder.fields(
            from: write.head.headers,
            platform: write.platform,
            clientAddress: peer.address,
            purpose: .passThrough,
            clientIsTrustedProxy: peer.isTrustedProxy,
            received: peer.received(write.head.version)
        ).headers
        // The body is read whole and stored so: the client's framing is not this request's, on the wire (the
        // encoder writes its own) nor in what the queue keeps and shows.
        headers.remove(name: "transfer-encoding")
        QueueEntry.setIdempotencyKey(in: &headers, queueID: id)
        let upstream = UpstreamRequest(
            method: write.head.method,
            target: write.target.description,
            headers: headers,
            body: write.body
        )
        guard queue.tracksIdentifiers else {
            let plan = WriteQueue.IdentifierPlan(request: upstream, localId: nil, names: [], mustQueue: false)
            admit(plan, id: id, write: write, queue: queue, proxy: proxy, sink: sink)
            return
        }
        // Some route creates entities under local identifiers: what this write creates or names is decided first.
        let boundSink = NIOLoopBound(sink, eventLoop: sink.eventLoop)
        sink.eventLoop.makeFutureWithTask {
            try await queue.identifierPlan(for: upstream, route: write.route)
        }.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let plan):
                self.admit(plan, id: id, write: write, queue: queue, proxy: proxy, sink: boundSink.value)
            case .failure(let error):
                boundSink.value.write(
                    error as? ProxyError ?? ProxyError(.internalError, "the queued write failed", detail: "\(error)")
                )
            }
        }
    }

    /// Forwards the write, or queues it: when the backend cannot take it now, when its route has a backlog, or
    /// when `plan` says it must be.
    private func admit(
        _ plan: WriteQueue.IdentifierPlan,
        id: String,
        write: Write,
        queue: WriteQueue,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        let upstream = plan.request
        let queued = { @Sendable (failure: String?) in
            QueuedRequest(upstream, failure: failure, id: id, localId: plan.localId, names: plan.names)
        }
        let eventLoop = sink.eventLoop
        let logger = proxy.logger
        let client = proxy.client
        // The backend's answer streams to the client as pass-through answers do, whatever its size; only an
        // answer whose status queues the write is held back.
        let relay = PassThroughResponder.relay(
            for: write.head,
            target: write.target,
            annotation: nil,
            invalidator: proxy.invalidator,
            to: sink
        )
        let answer = QueuedWriteAnswerFilter(
            passingTo: relay,
            retryableStatuses: Set(queue.configuration.retryableStatuses),
            eventLoop: eventLoop
        )
        let boundSink = NIOLoopBound(sink, eventLoop: eventLoop)

        // Succeeds with the 202 when the write was queued, with nil when the backend's answer went to the client.
        queue.admitWrite(on: write.route, eventLoop: eventLoop) {
            queueBehindBacklog -> EventLoopFuture<UpstreamResponse?> in
            if queueBehindBacklog || plan.mustQueue {
                return Self.enqueue(queued(nil), queue: queue, on: eventLoop).map { $0 }
            }
            // The body is in memory: it goes with the request, and again if a stale connection refuses it.
            return client.forward(upstream, body: nil, on: eventLoop, to: answer)
                .flatMap { () -> EventLoopFuture<UpstreamResponse?> in
                    guard let status = answer.statusToQueueFor else { return eventLoop.makeSucceededFuture(nil) }
                    let failure = "backend answered \(status.code)"
                    return Self.enqueue(queued(failure), queue: queue, on: eventLoop).map { $0 }
                }
                .flatMapError { error -> EventLoopFuture<UpstreamResponse?> in
                    let failure: String
                    if let status = answer.statusToQueueFor {
                        failure = "backend answered \(status.code)"
                    } else if answer.progress == .waitingForHead, let proxyError = error as? ProxyError,
                        proxyError.kind == .network || proxyError.kind == .timeout
                    {
                        failure = proxyError.message
                    } else {
                        return eventLoop.makeFailedFuture(error)
                    }
                    return Self.enqueue(queued(failure), queue: queue, on: eventLoop).map { $0 }
                }
        }
        .hop(to: eventLoop).assumeIsolated().whenComplete { result in
            switch result {
            case .success(.none):
                // The backend's answer went to the client through the relay.
                break
            case .success(.some(let queued)):
                boundSink.value.write(queued, forwarded: false, annotation: nil)
            case .failure(let error):
                let proxyError =
                    error as? ProxyError ?? ProxyError(.internalError, "the queued write failed", detail: "\(error)")
                var metadata: Logger.Metadata = ["target": "\(write.target)", "error": "\(proxyError)"]
                if let id = boundSink.value.accessNotes?.requestID { metadata["request_id"] = .string(id) }
                logger.error("queued write failed", metadata: metadata)
                switch answer.progress {
                case .waitingForHead: boundSink.value.write(proxyError)
                // Part of the backend's answer is out; the only honest signal left is to cut it short.
                case .streaming: boundSink.value.abort()
                case .ended: break
                }
            }
        }
    }

    /// Stores the request durably; the 202 is only built once the store has it. Its `failure` is why the backend
    /// did not take it, nil when it was queued without being sent.
    private static func enqueue(
        _ request: QueuedRequest,
        queue: WriteQueue,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<UpstreamResponse> {
        eventLoop.makeFutureWithTask {
            let receipt = try await queue.enqueue(request)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "Location", value: receipt.location)
            headers.add(name: "Cache-Control", value: "no-store")
            return UpstreamResponse(status: receipt.status, headers: headers, body: ByteBuffer(string: receipt.json))
        }
    }
}

/// A queued write's answer: passed to the client as it streams in, unless its status is one that queues the
/// write (`queue.retryableStatuses`); such an answer is read past, and the write is queued.
private final class QueuedWriteAnswerFilter: ForwardedResponseSink {
    private let relay: ForwardedResponseRelay
    private let retryableStatuses: Set<Int>
    private let eventLoop: any EventLoop
    private let heldBackStatus: NIOLoopBoundBox<HTTPResponseStatus?>

    init(passingTo relay: ForwardedResponseRelay, retryableStatuses: Set<Int>, eventLoop: any EventLoop) {
        self.relay = relay
        self.retryableStatuses = retryableStatuses
        self.eventLoop = eventLoop
        self.heldBackStatus = NIOLoopBoundBox(nil, eventLoop: eventLoop)
    }

    /// The status the backend answered that queues the write, if it did.
    var statusToQueueFor: HTTPResponseStatus? { heldBackStatus.value }

    /// How far the answer passed to the client has come.
    var progress: ForwardedResponseRelay.Progress { relay.progress }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        guard !retryableStatuses.contains(Int(status.code)) else {
            heldBackStatus.value = status
            return
        }
        relay.receiveHead(status: status, headers: headers)
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        heldBackStatus.value == nil ? relay.receiveBodyPart(buffer) : eventLoop.makeSucceededVoidFuture()
    }

    func receiveEnd() {
        if heldBackStatus.value == nil { relay.receiveEnd() }
    }
}
