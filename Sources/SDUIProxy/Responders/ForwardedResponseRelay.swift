import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Passes a backend's response to a ``ResponseSink`` as it streams in: end-to-end headers only, with the cache's
/// annotation (`Cache-Status`, `X-Cache`) when the request was on the cache path. `receivedHead` sees the backend's head first (invalidation).
///
/// The network client calls it on the sink's loop; the state it keeps is bound to that loop.
final class ForwardedResponseRelay: ForwardedResponseSink {
    /// How far the response has come.
    enum Progress {
        case waitingForHead
        case streaming
        case ended
    }

    private final class State {
        let sink: any ResponseSink
        var progress = Progress.waitingForHead

        init(sink: any ResponseSink) {
            self.sink = sink
        }
    }

    private let state: NIOLoopBound<State>
    private let annotation: CacheAnnotation?
    private let receivedHead: @Sendable (HTTPResponseStatus, HTTPHeaders) -> Void

    init(
        to sink: any ResponseSink,
        annotation: CacheAnnotation?,
        receivedHead: @escaping @Sendable (HTTPResponseStatus, HTTPHeaders) -> Void
    ) {
        self.state = NIOLoopBound(State(sink: sink), eventLoop: sink.eventLoop)
        self.annotation = annotation
        self.receivedHead = receivedHead
    }

    /// How far the response has come; read on the sink's loop.
    var progress: Progress { state.value.progress }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        receivedHead(status, headers)
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(headers)
        if var annotation {
            annotation.status.forwardStatus = status.code
            annotation.add(to: &headers)
        }
        let state = self.state.value
        state.progress = .streaming
        state.sink.writeHead(status: status, headers: headers, cacheResult: annotation?.result)
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        state.value.sink.writeBodyPart(buffer)
    }

    func receiveEnd() {
        let state = self.state.value
        state.progress = .ended
        state.sink.writeEnd()
    }
}
