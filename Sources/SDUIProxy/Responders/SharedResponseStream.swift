import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization

/// One backend response streamed to every client that sent the same request before its head came: what identical
/// misses of a response too large to store share instead of a request each (``SharedResponseStreams``).
///
/// The network client hands it the response on the loop of the exchange; each subscriber gets it on its own loop,
/// in order. A body part is let go once every subscriber took it, so memory stays one part per stream, whatever
/// the response's size. A subscriber that cannot take a part (its client went away), or has not taken one
/// `stallLimit` after it was sent (a client that stopped reading must not hold the others), is dropped and its
/// response cut short; the others go on, and when none is left the exchange fails, which stops it. An answer
/// meant for the first client only (``CacheFillPolicy/mayShareStreamedResponse(status:headers:)``) goes to it
/// alone, and the others ask the backend themselves.
final class SharedResponseStream: ForwardedResponseSink {
    /// A client's part in the stream.
    struct Subscriber: Sendable {
        /// Where the response goes: the client's relay, called on `eventLoop` only.
        let sink: any ForwardedResponseSink
        let eventLoop: any EventLoop
        /// Told on `eventLoop` when the exchange failed, or the client was dropped from it; the relay's progress
        /// says what the client can still get.
        let failed: @Sendable (ProxyError) -> Void
        /// Run on `eventLoop` when the answer may not be shared: the client's request goes to the backend alone.
        let goAlone: @Sendable () -> Void
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

    /// The failure of the exchange when no subscriber is left to take its body.
    struct NoSubscriberLeft: Error {}

    private let state = Mutex(State())
    /// The loop the network client calls this stream on.
    private let eventLoop: any EventLoop
    private let stallLimit: TimeAmount

    init(eventLoop: any EventLoop, stallLimit: TimeAmount = .seconds(10)) {
        self.eventLoop = eventLoop
        self.stallLimit = stallLimit
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

    /// An interim response goes to every client joined so far: each asked the same of the backend.
    func receiveInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {
        let subscribers = state.withLock { $0.subscribers }
        for (_, subscriber) in subscribers {
            subscriber.eventLoop.execute { subscriber.sink.receiveInterim(status: status, headers: headers) }
        }
    }

    func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
        let shared = CacheFillPolicy.mayShareStreamedResponse(status: status, headers: headers)
        let (receiving, alone) = state.withLock { state in
            state.phase = .streaming
            if !shared, state.subscribers.count > 1 {
                let others = state.subscribers.dropFirst().map(\.subscriber)
                state.subscribers.removeLast(state.subscribers.count - 1)
                return (state.subscribers, others)
            }
            return (state.subscribers, [])
        }
        for (_, subscriber) in receiving {
            subscriber.eventLoop.execute { subscriber.sink.receiveHead(status: status, headers: headers) }
        }
        for subscriber in alone { subscriber.eventLoop.execute { subscriber.goAlone() } }
    }

    func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let subscribers = state.withLock { $0.subscribers }
        guard !subscribers.isEmpty else { return eventLoop.makeFailedFuture(NoSubscriberLeft()) }
        let part = PartDelivery(stream: self, waitingFor: subscribers.map(\.number), on: eventLoop)
        for (number, subscriber) in subscribers {
            subscriber.eventLoop.flatSubmit { subscriber.sink.receiveBodyPart(buffer) }
                .hop(to: eventLoop).assumeIsolated()
                .whenComplete { result in part.taken(by: number, succeeded: (try? result.get()) != nil) }
        }
        let stalled = eventLoop.assumeIsolated().scheduleTask(in: stallLimit) { part.stalled() }
        let done = part.done
        done.whenComplete { _ in stalled.cancel() }
        return done
    }

    func receiveEnd() {
        for (_, subscriber) in finish() {
            subscriber.eventLoop.execute { subscriber.sink.receiveEnd() }
        }
    }

    /// The exchange failed (before its head, or part-way through the body): each subscriber is told on its loop.
    /// Once the stream has ended, there is no one left to tell.
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

    /// Drops the subscribers numbered `numbers`, each told why on its loop; the number left.
    fileprivate func drop(_ numbers: Set<Int>, because error: ProxyError) -> Int {
        let (dropped, left) = state.withLock { state in
            let dropped = state.subscribers.filter { numbers.contains($0.number) }.map(\.subscriber)
            state.subscribers.removeAll { numbers.contains($0.number) }
            return (dropped, state.subscribers.count)
        }
        for subscriber in dropped { subscriber.eventLoop.execute { subscriber.failed(error) } }
        return left
    }
}

/// One body part on its way to a stream's subscribers, on the exchange's loop: done when each took it, was dropped
/// for failing to, or stalled past the limit.
private final class PartDelivery: Sendable {
    private struct Progress {
        var waiting: Set<Int>
        var failed: Set<Int> = []
        var settled = false
    }

    private let stream: SharedResponseStream
    private let progress: NIOLoopBoundBox<Progress>
    private let promise: EventLoopPromise<Void>

    init(stream: SharedResponseStream, waitingFor numbers: [Int], on eventLoop: any EventLoop) {
        self.stream = stream
        self.progress = NIOLoopBoundBox(Progress(waiting: Set(numbers)), eventLoop: eventLoop)
        self.promise = eventLoop.makePromise(of: Void.self)
    }

    var done: EventLoopFuture<Void> { promise.futureResult }

    func taken(by number: Int, succeeded: Bool) {
        progress.value.waiting.remove(number)
        if !succeeded { progress.value.failed.insert(number) }
        if progress.value.waiting.isEmpty { settle() }
    }

    /// The limit passed: whoever has not taken the part yet is dropped.
    func stalled() {
        guard !progress.value.settled else { return }
        let slow = progress.value.waiting
        progress.value.waiting = []
        let left = stream.drop(slow, because: ProxyError(.timeout, "the client stopped reading the response"))
        settle(left: left)
    }

    private func settle(left: Int? = nil) {
        guard !progress.value.settled else { return }
        progress.value.settled = true
        var remaining = left
        if !progress.value.failed.isEmpty {
            remaining = stream.drop(progress.value.failed, because: ProxyError(.network, "the client went away"))
        }
        if remaining == 0 {
            promise.fail(SharedResponseStream.NoSubscriberLeft())
        } else {
            promise.succeed()
        }
    }
}
