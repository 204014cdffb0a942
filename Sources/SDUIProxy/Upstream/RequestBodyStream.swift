import NIOCore

/// Carries a client's request body to the upstream client as it arrives, with backpressure: the producer
/// (the client connection) is asked to stop reading while more than ``highWatermark`` bytes wait, and to read
/// again once they drop under ``lowWatermark``.
///
/// Lives on one event loop; every method must be called there.
public final class RequestBodyStream: Sendable {
    public let eventLoop: any EventLoop
    public let highWatermark = 256 * 1024
    public let lowWatermark = 64 * 1024

    private struct State {
        var buffered: CircularBuffer<ByteBuffer> = []
        var bufferedBytes = 0
        var finished = false
        var failure: (any Error)?
        var waitingConsumer: EventLoopPromise<ByteBuffer?>?
        var producerPaused = false
        var onDemand: (() -> Void)?
        var onFinish: (() -> Void)?
        var onFailure: ((any Error) -> Void)?
    }

    private let state: NIOLoopBoundBox<State>
    /// The body's length when the client declared it.
    public let contentLength: Int?

    /// A stream that holds all of `body` already: for a body read whole before it is sent (a queued write).
    /// Call it on `eventLoop`.
    public static func complete(_ body: ByteBuffer, on eventLoop: any EventLoop) -> RequestBodyStream {
        let stream = RequestBodyStream(eventLoop: eventLoop, contentLength: body.readableBytes)
        _ = stream.append(body)
        stream.finish()
        return stream
    }

    public init(eventLoop: any EventLoop, contentLength: Int?) {
        self.eventLoop = eventLoop
        self.contentLength = contentLength
        self.state = NIOLoopBoundBox(State(), eventLoop: eventLoop)
    }

    // MARK: Producer side (the client connection)

    /// Hands over a part of the body. Returns false when the producer should pause reading until
    /// `onDemand` (given to ``setDemandHandler(_:)``) is called.
    public func append(_ buffer: ByteBuffer) -> Bool {
        // Nobody takes the rest of a body that failed (the backend answered, or gave up): it is dropped.
        if state.value.failure != nil { return true }
        if let consumer = state.value.waitingConsumer {
            state.value.waitingConsumer = nil
            consumer.succeed(buffer)
            return true
        }
        state.value.buffered.append(buffer)
        state.value.bufferedBytes += buffer.readableBytes
        if state.value.bufferedBytes > highWatermark {
            state.value.producerPaused = true
            return false
        }
        return true
    }

    /// The body is complete.
    public func finish() {
        state.value.finished = true
        // A whole body no longer fails: what waited for that is let go.
        state.value.onFailure = nil
        if let onFinish = state.value.onFinish {
            state.value.onFinish = nil
            onFinish()
        }
        if let consumer = state.value.waitingConsumer, state.value.buffered.isEmpty {
            state.value.waitingConsumer = nil
            consumer.succeed(nil)
        }
    }

    /// The body will never be complete (the client went away).
    public func fail(_ error: any Error) {
        state.value.failure = error
        state.value.buffered.removeAll()
        state.value.bufferedBytes = 0
        if let consumer = state.value.waitingConsumer {
            state.value.waitingConsumer = nil
            consumer.fail(error)
        }
        if let onFailure = state.value.onFailure {
            state.value.onFailure = nil
            onFailure(error)
        }
    }

    /// What to call once the whole body has arrived (at once when it already has): the moment the client's time
    /// ends and the backend's begins.
    public func setFinishHandler(_ handler: @escaping () -> Void) {
        if state.value.finished, state.value.failure == nil {
            handler()
        } else {
            state.value.onFinish = handler
        }
    }

    /// What to call when the body fails, at once when it has failed already: a consumer busy writing a part learns
    /// it without asking for the next.
    public func setFailureHandler(_ handler: @escaping (any Error) -> Void) {
        if let failure = state.value.failure {
            handler(failure)
        } else {
            state.value.onFailure = handler
        }
    }

    /// Whether the body failed: nobody takes its parts any more.
    public var hasFailed: Bool { state.value.failure != nil }

    /// Whether the body is whole and every part of it was taken.
    public var isDrained: Bool {
        state.value.finished && state.value.buffered.isEmpty && state.value.failure == nil
    }

    /// What to call when a paused producer may read again.
    public func setDemandHandler(_ handler: @escaping () -> Void) {
        state.value.onDemand = handler
    }

    // MARK: Consumer side (the upstream client)

    /// The next part, or nil when the body is complete.
    public func next() -> EventLoopFuture<ByteBuffer?> {
        if let failure = state.value.failure { return eventLoop.makeFailedFuture(failure) }
        if let buffer = state.value.buffered.popFirst() {
            state.value.bufferedBytes -= buffer.readableBytes
            if state.value.producerPaused, state.value.bufferedBytes < lowWatermark {
                state.value.producerPaused = false
                state.value.onDemand?()
            }
            return eventLoop.makeSucceededFuture(buffer)
        }
        if state.value.finished { return eventLoop.makeSucceededFuture(nil) }
        let promise = eventLoop.makePromise(of: ByteBuffer?.self)
        state.value.waitingConsumer = promise
        return promise.futureResult
    }

    /// Calls `write` for every part in order, waiting for each write before asking for the next part.
    public func drain(into write: @escaping @Sendable (ByteBuffer) -> EventLoopFuture<Void>) -> EventLoopFuture<Void> {
        let eventLoop = self.eventLoop
        return eventLoop.flatSubmit {
            self.next().flatMap { part -> EventLoopFuture<Void> in
                guard let part else { return eventLoop.makeSucceededVoidFuture() }
                return write(part).hop(to: eventLoop).flatMap { self.drain(into: write) }
            }
        }
    }
}
