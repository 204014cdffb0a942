import NIOCore
import SDUIProxyCore
import Synchronization

/// Counts and caps the open connections of a listener (`limits.maxConnections`): one over the cap is answered
/// 503 with the error body and closed, before any of its bytes are parsed.
///
/// The decision is made once, when a connection is set up; an admitted connection carries no handler of the
/// limiter's, so its requests pay nothing for the cap.
final class ConnectionLimiter: Sendable {
    private let open = Atomic<Int>(0)
    /// The admitted connections still open, so that a shutdown past its drain deadline can close them.
    private let admitted = Mutex<[ObjectIdentifier: any Channel]>([:])
    private let maximumCount: Atomic<Int>
    /// What a refused connection is told: which setting, or limit, it ran into.
    private let refusal: String

    init(maximum: Int, refusal: String = "too many open connections (limits.maxConnections)") {
        maximumCount = Atomic(maximum)
        self.refusal = refusal
    }

    /// The cap. A reload sets it; connections open over a lowered cap are left to finish.
    var maximum: Int {
        get { maximumCount.load(ordering: .relaxed) }
        set { maximumCount.store(newValue, ordering: .relaxed) }
    }

    var openConnections: Int { open.load(ordering: .relaxed) }

    /// Admits an accepted connection, counting it until it closes; or, over the cap, sets it up to be answered
    /// 503 and closed. Call it from the child channel initializer, before any other handler is added.
    ///
    /// - Returns: whether the connection was admitted; a refused one must get no other handlers.
    func admit(_ channel: any Channel) throws -> Bool {
        let count = open.wrappingAdd(1, ordering: .relaxed).newValue
        guard count <= maximum else {
            open.wrappingSubtract(1, ordering: .relaxed)
            try channel.pipeline.syncOperations.addHandler(Refusal(message: refusal))
            return false
        }
        let id = ObjectIdentifier(channel)
        admitted.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { _ in
            self.admitted.withLock { _ = $0.removeValue(forKey: id) }
            self.open.wrappingSubtract(1, ordering: .relaxed)
        }
        return true
    }

    /// Closes every admitted connection still open, whatever it is doing.
    func closeAll() {
        for channel in admitted.withLock({ Array($0.values) }) {
            // Handlers that turn a close into a lingering one let this one through.
            channel.pipeline.fireUserInboundEventTriggered(CloseNow())
            channel.close(promise: nil)
        }
    }

    /// Asks the handlers of a connection that hold closes back (to linger after an answer) to close it now.
    struct CloseNow: Sendable {}

    /// Answers a connection over the cap and closes it; nothing it sends is read.
    private final class Refusal: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        private let message: String

        init(message: String) {
            self.message = message
        }

        func channelActive(context: ChannelHandlerContext) {
            let error = ProxyError(.unavailable, message)
            let body = error.jsonBody()
            let response =
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: response)))
                .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
    }
}
