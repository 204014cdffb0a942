import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Passes a backend's response to a ``ResponseSink`` as it streams in: end-to-end headers only, with `X-Cache`
/// when the request went around the cache. `receivedHead` sees the backend's head first (invalidation).
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
    private let cacheResult: CacheResult?
    private let receivedHead: @Sendable (HTTPResponseStatus, HTTPHeaders) -> Void

    init(
        to sink: any ResponseSink,
        cacheResult: CacheResult?,
        receivedHead: @escaping @Sendable (HTTPResponseStatus, HTTPHeaders) -> Void
    ) {
        self.state = NIOLoopBound(State(sink: sink), eventLoop: sink.eventLoop)
        self.cacheResult = cacheResult
        self.receivedHead = receivedHead
    }

    /// How far the response has come; read on the sink's loop.
    var progress: Progress { state.value.progress }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        receivedHead(status, headers)
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(headers)
        if let cacheResult { headers.add(name: "X-Cache", value: cacheResult.rawValue) }
        let state = self.state.value
        state.progress = .streaming
        state.sink.writeHead(status: status, headers: headers, cacheResult: cacheResult)
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
