import Logging
import NIOCore
import NIOHTTP2

/// The last handler of an HTTP/2 connection. Errors reach it from the connection handler: one stream's (a malformed
/// request, a length that does not match), for which that stream alone was reset and its siblings go on, and the
/// connection's (a flood the connection handler's limits caught, bytes that are not HTTP/2), for which it has sent
/// GOAWAY. A connection error closes the connection at once, so that its streams end with it and nothing they asked
/// for goes on to the backend; so does anything below HTTP/2 (TLS, the socket).
final class HTTP2ConnectionErrorHandler: ChannelInboundHandler {
    typealias InboundIn = Any

    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard Self.endsConnection(error) else {
            logger.debug("HTTP/2 stream reset on an error", metadata: ["error": "\(error)"])
            return
        }
        logger.info(
            "HTTP/2 connection closed on an error",
            metadata: ["client": "\(context.remoteAddress?.ipAddress ?? "?")", "error": "\(error)"]
        )
        context.close(promise: nil)
    }

    /// Whether `error` is the connection's: swift-nio-http2's flood and framing errors, which it answers with
    /// GOAWAY, and any error that is not HTTP/2's. Its other errors are a stream's, which it answered with
    /// RST_STREAM on that stream.
    ///
    /// swift-nio-http2 reports the error without saying which it was, and a few types are either: a flow-control
    /// violation (a stream's window or the connection's), a frame in the wrong state, a zero window increment, a
    /// frame for a stream it does not know (a client's for an idle stream, or this side's own write behind a reset it
    /// still held while the channel was not writable, which it reports without a GOAWAY). Those count as a stream's,
    /// so that an honest client's race (DATA crossing a reset) never costs it its connection; when one was the
    /// connection's, the client has its GOAWAY, and the idle limit closes what it leaves open.
    static func endsConnection(_ error: any Error) -> Bool {
        switch error {
        case is NIOHTTP2Errors.ExcessiveRSTFrames, is NIOHTTP2Errors.ExcessiveContinuationFrames,
            is NIOHTTP2Errors.ExcessiveControlFrames, is NIOHTTP2Errors.ExcessiveNumberOfGlitches,
            is NIOHTTP2Errors.ExcessiveStreamErrors, is NIOHTTP2Errors.ExcessiveEmptyDataFrames,
            is NIOHTTP2Errors.ExcessivelyLargeHeaderBlock, is NIOHTTP2Errors.ExcessiveOutboundFrameBuffering,
            is NIOHTTP2Errors.BadClientMagic, is NIOHTTP2Errors.UnableToParseFrame,
            // More streams than SETTINGS_MAX_CONCURRENT_STREAMS, or stream identifiers out of order: swift-nio-http2
            // answers these with GOAWAY too.
            is NIOHTTP2Errors.MaxStreamsViolation, is NIOHTTP2Errors.StreamIDTooSmall,
            is NIOHTTP2Errors.InvalidStreamIDForPeer, is NIOHTTP2Errors.MissingPreface,
            // A SETTINGS frame that is wrong, a PUSH_PROMISE to a server, a GOAWAY that raises its last stream id:
            // swift-nio-http2 raises these as the connection's only.
            is NIOHTTP2Errors.InvalidSetting, is NIOHTTP2Errors.ReceivedBadSettings,
            is NIOHTTP2Errors.PushInViolationOfSetting, is NIOHTTP2Errors.RaisedGoawayLastStreamID:
            true
        case is any NIOHTTP2Error, is NIOHTTP2Errors.StreamError:
            false
        default:
            true
        }
    }
}
