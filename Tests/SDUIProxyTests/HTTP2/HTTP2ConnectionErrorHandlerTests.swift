import NIOHTTP2
import Testing

@testable import SDUIProxy

/// Which of swift-nio-http2's errors end the connection: it reports an error without saying whether it was a
/// stream's or the connection's, so the handler decides by type.
@Suite("The HTTP/2 errors that end a connection")
struct HTTP2ConnectionErrorHandlerTests {
    @Test("errors swift-nio-http2 raises only as the connection's, and floods, end it; so does anything not HTTP/2's")
    func connectionErrors() {
        let errors: [any Error] = [
            NIOHTTP2Errors.invalidSetting(setting: HTTP2Setting(parameter: .enablePush, value: 2)),
            NIOHTTP2Errors.receivedBadSettings(),
            NIOHTTP2Errors.pushInViolationOfSetting(),
            NIOHTTP2Errors.raisedGoawayLastStreamID(),
            NIOHTTP2Errors.excessiveRSTFrames(),
            NIOHTTP2Errors.missingPreface(),
            CancellationError(),
        ]
        for error in errors { #expect(HTTP2ConnectionErrorHandler.endsConnection(error), "\(error)") }
    }

    @Test("errors that may be one stream's leave the connection and its other streams alone")
    func streamErrors() {
        let errors: [any Error] = [
            // Also this side's WINDOW_UPDATE behind a reset NIOHTTP2Handler held while the channel was full.
            NIOHTTP2Errors.noSuchStream(streamID: 1),
            NIOHTTP2Errors.flowControlViolation(),
            NIOHTTP2Errors.badStreamStateTransition(),
            NIOHTTP2Errors.invalidWindowIncrementSize(),
            NIOHTTP2Errors.contentLengthViolated(),
            NIOHTTP2Errors.streamError(streamID: 3, baseError: NIOHTTP2Errors.flowControlViolation()),
        ]
        for error in errors { #expect(!HTTP2ConnectionErrorHandler.endsConnection(error), "\(error)") }
    }
}
