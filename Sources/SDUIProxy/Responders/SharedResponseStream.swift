import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization

/// One backend response streamed to every client that asked for it before its head came: what identical misses
/// of a response too large to store share instead of a request each (``SharedResponseStreams``).
///
/// The network client hands it the response on the loop of the exchange; each subscriber gets it on its own loop,
/// in order. A body part is let go once every subscriber took it, so the slowest client paces the backend and the
/// bytes held stay one part per stream, whatever the response's size. A subscriber that cannot take a part (its
/// client went away) is dropped and the others go on; when none is left, the exchange fails, which stops it.
final class SharedResponseStream: ForwardedResponseSink {
    /// A client's part in the stream.
    struct Subscriber: Sendable {
        /// Where the response goes: the client's relay, called on `eventLoop` only.
        let sink: any ForwardedResponseSink
        let eventLoop: any EventLoop
        /// Told on `eventLoop` when the exchange failed; the relay's progress says what the client can still get.
        let failed: @Sendable (ProxyError) -> Void
    }

    private enum Phase {
        /// Subscribers may join.
        case waitingForHead
        case streaming
        case finished
    }

    private struct State {
        var phase = Phase.waitingForHead
        /// By the number they joined under.
        var subscribers: [(number: Int, subscriber: Subscriber)] = []
        var joined = 0
    }

    /// The failure of a body part when no subscriber is left to take it.
    struct NoSubscriberLeft: Error {}

    private let state = Mutex(State())
    /// The loop the network client calls this stream on.
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// How many clients the stream serves now.
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    /// Adds `subscriber` while the response's head has not come; false afterwards (its start is gone).
    func subscribe(_ subscriber: Subscriber) -> Bool {
        state.withLock { state in
            guard case .waitingForHead = state.phase else { return false }
            state.subscribers.append((state.joined, subscriber))
            state.joined += 1
            return true
        }
    }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        let subscribers = state.withLock { state in
            state.phase = .streaming
            return state.subscribers
        }
        for (_, subscriber) in subscribers {
            subscriber.eventLoop.execute { subscriber.sink.receiveHead(status: status, headers: headers) }
        }
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let subscribers = state.withLock { $0.subscribers }
        guard !subscribers.isEmpty else { return eventLoop.makeFailedFuture(NoSubscriberLeft()) }
        let taken = subscribers.map { _, subscriber in
            subscriber.eventLoop.flatSubmit { subscriber.sink.receiveBodyPart(buffer) }
        }
        return EventLoopFuture.whenAllComplete(taken, on: eventLoop).flatMapThrowing { results in
            var dropped = Set<Int>()
            for ((number, _), result) in zip(subscribers, results) {
                if case .failure = result { dropped.insert(number) }
            }
            guard !dropped.isEmpty else { return }
            let left = self.state.withLock { state -> Int in
                state.subscribers.removeAll { dropped.contains($0.number) }
                return state.subscribers.count
            }
            if left == 0 { throw NoSubscriberLeft() }
        }
    }

    func receiveEnd() {
        for (_, subscriber) in finish() {
            subscriber.eventLoop.execute { subscriber.sink.receiveEnd() }
        }
    }

    /// The exchange failed (before its head, or part-way through the body): each subscriber is told on its loop.
    func fail(_ error: ProxyError) {
        for (_, subscriber) in finish() {
            subscriber.eventLoop.execute { subscriber.failed(error) }
        }
    }

    private func finish() -> [(number: Int, subscriber: Subscriber)] {
        state.withLock { state in
            state.phase = .finished
            defer { state.subscribers = [] }
            return state.subscribers
        }
    }
}
