import NIOCore
import SDUIProxyCore

/// The caller's side of a forwarded exchange on a loop-local connection (``LoopLocalHTTPClient/forward(_:body:on:to:completion:)``):
/// where the request body comes from, where the response goes as it streams in, and the completion called once
/// the caller has it all.
///
/// The connection reads the backend and writes the body; this object keeps what outlives the connection's part
/// of the exchange. A response read whole may still have parts with a slow client: the connection goes back to
/// its pool at once, and the end is passed on, and the completion called, only once the client has taken every
/// part. Confined to its event loop, the connection's and the caller's.
final class ForwardedExchange: @unchecked Sendable {
    let sink: any ForwardedResponseSink
    /// The request body, streamed as the client sends it; nil when the request has none (or has it in memory).
    let body: RequestBodyStream?
    /// Whether the body goes out in chunks: the client did not say its length.
    let isChunked: Bool
    /// How long the backend has for its answer's head once it has the whole request (`upstream.timeout`).
    let headTimeout: TimeAmount
    private let eventLoop: any EventLoop
    /// Called once, on the loop, when the exchange has ended for the caller. A closure, not a promise: a future a
    /// forwarded request, and the callbacks on it, cost a pass-through GET about 3,000 instructions.
    private let completion: @Sendable (Result<Void, any Error>) -> Void

    /// Whether the whole request has been written: until then the backend's time has not started, and a
    /// connection whose exchange ends earlier cannot be reused.
    var requestSent: Bool
    /// Parts handed to the sink that it has not taken yet.
    private(set) var partsWithClient = 0
    /// Whether the backend's response was read whole; its end waits for the client to take the last parts.
    private var responseEnded = false
    /// Whether the connection's part of the exchange is over, whichever way it ended.
    private var connectionDone = false
    /// The connection carrying the exchange, once it has one: told when the client's body fails.
    weak var connection: UpstreamConnectionHandler?
    private var completed = false
    /// Why the caller gave the exchange up (its body failed, or its sink could not take a part): the error the
    /// exchange fails with, whatever the connection saw.
    private(set) var abandonment: (any Error)?

    init(
        sink: any ForwardedResponseSink,
        body: RequestBodyStream?,
        isChunked: Bool,
        headTimeout: TimeAmount,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        self.sink = sink
        self.body = body
        self.isChunked = isChunked
        self.headTimeout = headTimeout
        self.eventLoop = eventLoop
        self.completion = completion
        self.requestSent = body == nil
    }

    /// The caller gave the exchange up for `error`; the first reason is the one kept.
    func abandon(because error: any Error) {
        if abandonment == nil { abandonment = error }
    }

    /// From now on, a client's body that fails is ``bodyFailed(_:)``. On the loop, before the exchange asks for a
    /// connection.
    func watchBody() {
        body?.setFailureHandler { [weak self] error in self?.bodyFailed(error) }
    }

    /// The client's body will not be whole (too large, cut off, timed out): the caller is answered with its error
    /// at once, whether the exchange has a connection yet or still waits for one, and the connection carrying it
    /// closes under the request.
    func bodyFailed(_ error: any Error) {
        guard !requestSent, !connectionDone else { return }
        abandon(because: error)
        complete(.failure(error))
        connection?.exchangeAbandoned(self)
    }

    /// Hands a body part, read by `reader`, to the sink; the reader is told, on the loop, once the client took it
    /// or could not. (The connection itself, not a closure of its: that was one more object made and freed for
    /// every part.)
    func deliver(_ part: ByteBuffer, from reader: UpstreamConnectionHandler) {
        partsWithClient += 1
        let taken = sink.receiveBodyPart(part)
        // A client that took the part at once answers with the loop's one succeeded future. A callback on it would
        // run at once too, but after allocating two objects for every part (its closure, and NIO's around it):
        // settled here instead, in the same order. Any other future, or a loop that made a new one, is waited on.
        if taken === eventLoop.makeSucceededVoidFuture() {
            partSettled(.success(()), from: reader)
            return
        }
        taken.hop(to: eventLoop).whenComplete { result in
            self.partSettled(result, from: reader)
        }
    }

    /// The client took a part handed to the sink, or could not.
    private func partSettled(_ result: Result<Void, any Error>, from reader: UpstreamConnectionHandler) {
        partsWithClient -= 1
        if case .failure(let error) = result {
            abandon(because: error)
            complete(.failure(error))
        } else if partsWithClient == 0, responseEnded {
            finish()
        }
        reader.partTaken(result, of: self)
    }

    /// What the pool tells the exchange's caller when the connection's part of it ends.
    func connectionEnded(_ result: Result<UpstreamResponse, any Error>) {
        connectionDone = true
        connection = nil
        if !requestSent {
            // Nothing takes the rest of the body now (the backend answered early, or the exchange failed): what
            // waits for its next part is let go, and the parts the client still sends are dropped.
            body?.fail(ProxyError(.network, "the exchange with the backend ended before the whole body was sent"))
        }
        switch result {
        case .success:
            responseEnded = true
            if partsWithClient == 0 { finish() }
        case .failure(let error):
            complete(.failure(abandonment ?? error))
        }
    }

    private func finish() {
        guard !completed else { return }
        sink.receiveEnd()
        complete(.success(()))
    }

    private func complete(_ result: Result<Void, any Error>) {
        guard !completed else { return }
        completed = true
        completion(result)
    }
}
