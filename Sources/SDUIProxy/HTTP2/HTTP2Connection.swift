import NIOCore
import NIOHTTP2
import SDUIProxyCore

/// The streams of one HTTP/2 connection of the public listener, each an ``HTTP2Stream``, kept in one handler behind
/// `NIOHTTP2Handler`.
///
/// swift-nio-http2 can make each stream a child channel with a pipeline of its own; made, activated, read and torn
/// down for every request, that cost more than the rest of a hit but HPACK (see `Benchmarks/HISTORY.md`). Here the
/// connection handler's frames arrive with their stream's id, and this handler gives each to its stream:
///
/// - A HEADERS frame on a stream it does not know opens one. `NIOHTTP2Handler` has checked the stream may open
///   (`maxConcurrentStreams`, ids in order); a stream ends when it reports the stream closed (both ends done, or a
///   reset either way), and all end with the connection.
/// - Flow control inbound is this handler's (`NIOHTTP2Handler` enforces the windows, and leaves giving them back to
///   whoever reads): the connection's window is given back as it runs low, since a stream holds at most its own
///   window; a stream's as its body's taker takes the parts (``HTTP2InboundWindow``). A stream whose taker is full
///   holds its parts and gives nothing back, and its client stops.
/// - Streams write their frames through it; flushes go down to ``HTTP2FlushCoalescer``, one a turn of the loop.
final class HTTP2Connection: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let eventLoop: any EventLoop
    private let runtime: ProxyRuntime
    private let requests: RequestTally
    private let isSecure: Bool
    private var streams: [HTTP2StreamID: HTTP2Stream] = [:]
    private var window = HTTP2InboundWindow()
    private var context: ChannelHandlerContext?
    /// The client's address, read once.
    private(set) var remoteAddress: SocketAddress?

    init(runtime: ProxyRuntime, eventLoop: any EventLoop, requests: RequestTally, isSecure: Bool) {
        self.eventLoop = eventLoop
        self.runtime = runtime
        self.requests = requests
        self.isSecure = isSecure
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        remoteAddress = context.channel.remoteAddress
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        endAllStreams()
        self.context = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard frame.streamID != .rootStream else { return context.fireChannelRead(data) }
        switch frame.payload {
        case .headers(let headers):
            if let stream = streams[frame.streamID] { return stream.received(headers) }
            let stream = HTTP2Stream(
                id: frame.streamID,
                connection: self,
                runtime: runtime,
                requests: requests,
                isSecure: isSecure
            )
            streams[frame.streamID] = stream
            stream.received(headers)
        case .data(let data):
            streams[frame.streamID]?.received(data, flowControlledLength: Self.flowControlledLength(of: data))
        default:
            // RST_STREAM is reported as the stream's close (below); WINDOW_UPDATE and PRIORITY are the connection
            // handler's.
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let updated as NIOHTTP2WindowUpdatedEvent where updated.streamID == .rootStream:
            // The connection's window comes back as it runs low, whatever the DATA was for: a stream holds at most
            // its own window, and DATA for a stream closed meanwhile is counted too.
            if let left = updated.inboundWindowSize, let increment = window.refill(left: left) {
                giveBack(increment, on: .rootStream)
            }
        case let closed as StreamClosedEvent:
            streams.removeValue(forKey: closed.streamID)?.closed()
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// A stream error `NIOHTTP2Handler` raised on one of the stream's frames (an END_STREAM that contradicts the
    /// `content-length` written, for one): it sends nothing for it and leaves the stream as it was, so the stream is
    /// reset here and ends, or its client would wait on it for good. The error goes on to be logged.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError,
            let stream = streams.removeValue(forKey: streamError.streamID)
        {
            stream.failed()
        }
        context.fireErrorCaught(error)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        endAllStreams()
        context.fireChannelInactive()
    }

    private func endAllStreams() {
        let ending = streams.values
        streams.removeAll()
        for stream in ending { stream.closed() }
    }

    // MARK: What streams ask of it

    /// Writes `payload` on stream `id`; it goes out at the next flush.
    func write(_ payload: HTTP2Frame.FramePayload, on id: HTTP2StreamID, promise: EventLoopPromise<Void>?) {
        guard let context else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: payload)), promise: promise)
    }

    func flush() {
        context?.flush()
    }

    /// Gives `increment` bytes of window back to the client, on the connection or on one stream, at once: a stream
    /// gives its back when its body's taker takes a held part, outside any read.
    func giveBack(_ increment: Int, on id: HTTP2StreamID) {
        write(.windowUpdate(windowSizeIncrement: increment), on: id, promise: nil)
        flush()
    }

    /// A DATA frame's length as flow control counts it: its data and its padding (RFC 9113 section 6.1).
    private static func flowControlledLength(of data: HTTP2Frame.FramePayload.Data) -> Int {
        data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
    }
}
