import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Answers `GET /.sdui/queue/ID` on the public listener: where a queued write stands, for the client the 202's
/// `Location` sent here. Read-only, and only the outcome (``QueueEntryStatus/publicJSON``); the admin listener's
/// `GET /queue/ID` shows the rest.
///
/// The id is the only credential: 128 random bits (``WriteQueue/newID()``). An id the queue could not have made is
/// answered like an unknown one, without asking the store.
struct QueueStatusResponder {
    func respond(to id: String, proxy: ProxyContext, sink: any ResponseSink) {
        guard let queue = proxy.writeQueue, WriteQueue.isQueueID(id) else {
            return sink.write(Self.unknown)
        }
        let logger = proxy.logger
        let boundSink = NIOLoopBound(sink, eventLoop: sink.eventLoop)
        sink.eventLoop.makeFutureWithTask { try await queue.store.status(id: id) }
            .hop(to: sink.eventLoop).assumeIsolated().whenComplete { result in
                let sink = boundSink.value
                switch result {
                case .success(let status?):
                    let body = ByteBuffer(string: status.publicJSON)
                    var headers = HTTPHeaders()
                    headers.add(name: "Content-Type", value: "application/json")
                    headers.add(name: "Content-Length", value: String(body.readableBytes))
                    // It changes as the write is delivered: no cache in front may keep it.
                    headers.add(name: "Cache-Control", value: "no-store")
                    sink.writeComposed(status: .ok, headers: headers, body: body, cacheResult: nil)
                case .success(nil):
                    sink.write(Self.unknown)
                case .failure(let error):
                    // The store's words stay in the log: they can name its file or database.
                    logger.error("cannot read a queued write's status", metadata: ["error": "\(error)"])
                    sink.write(ProxyError(.unavailable, "the write queue cannot be read now"))
                }
            }
    }

    /// The answer for an id no queued write has (or no longer has, past `queue.retention`).
    private static let unknown = ProxyError(.notFound, "no queued write has this id")
}
