import Logging
import NIOCore

/// The last handler of an HTTP/2 connection: an error that reaches it is the connection's (a protocol violation,
/// a flood the connection handler's limits caught, a TLS failure). The connection handler has sent GOAWAY for
/// it; this closes the connection at once, so that its streams end with it and nothing they asked for goes on to
/// the backend.
final class HTTP2ConnectionErrorHandler: ChannelInboundHandler {
    typealias InboundIn = Any

    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.info(
            "HTTP/2 connection closed on an error",
            metadata: ["client": "\(context.remoteAddress?.ipAddress ?? "?")", "error": "\(error)"]
        )
        context.close(promise: nil)
    }
}
