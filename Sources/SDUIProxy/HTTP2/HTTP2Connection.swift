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
/// - The connection's idle limit and its drain are ``HTTP2ConnectionLifecycle``'s decisions, run here: the streams
///   they count are this handler's, so stream events stop here instead of crossing more handlers (each event costs
///   every handler it crosses a cast of it per type it looks for, three events a request).
final class HTTP2Connection: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let eventLoop: any EventLoop
    private let runtime: ProxyRuntime
    private let requests: RequestTally
    private let isSecure: Bool
    /// How long a drain may take, from its start, before the connection is closed with streams still open.
    private let drainGrace: TimeAmount
    private var streams: [HTTP2StreamID: HTTP2Stream] = [:]
    private var window = HTTP2InboundWindow()
    private var lifecycle: HTTP2ConnectionLifecycle
    private var idleTimer: Scheduled<Void>?
    private var graceTimer: Scheduled<Void>?
    private var context: ChannelHandlerContext?
    /// The client's address, read once.
    private(set) var remoteAddress: SocketAddress?
    /// The fields the last request of any of its streams went to the backend with (``ClientPeer/lastUpstreamFields``):
    /// a client's streams are built from the same fields as one connection's requests are.
    let lastUpstreamFields = RepeatedUpstreamFields()

    /// The idle limit is the listener's (`limits.idleTimeout`); it starts when the handler is added, which is when
    /// the connection's protocol became known (after the TLS handshake and ALPN, or the preface).
    init(
        runtime: ProxyRuntime,
        eventLoop: any EventLoop,
        requests: RequestTally,
        isSecure: Bool,
        drainGrace: TimeAmount
    ) {
        self.eventLoop = eventLoop
        self.runtime = runtime
        self.requests = requests
        self.isSecure = isSecure
        self.drainGrace = drainGrace
        lifecycle = HTTP2ConnectionLifecycle(
            now: eventLoop.now,
            idleTimeout: runtime.context.configuration.limits.idleTimeout.timeAmount
        )
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        remoteAddress = context.channel.remoteAddress
        idleTimer = schedule(.idle, at: lifecycle.firstIdleCheck)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        endAllStreams()
        cancelTimers()
        self.context = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard frame.streamID != .rootStream else {
            if case .ping(let ping, ack: true) = frame.payload {
                run(lifecycle.pingAcknowledged(data: ping.integer))
            }
            return context.fireChannelRead(data)
        }
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
            lifecycle.streamOpened(id: Int32(frame.streamID))
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
        // A stream opens with its HEADERS frame (above): its event, one a request, is let go without a cast.
        if type(of: event) == NIOHTTP2StreamCreatedEvent.self { return }
        switch event {
        case let closed as StreamClosedEvent:
            // NIOHTTP2Handler also reports closed a stream it refused in its HEADERS frame (a `content-length` its
            // END_STREAM contradicts), never opened here: no such stream is found.
            removeStream(closed.streamID)?.closed()
        case let updated as NIOHTTP2WindowUpdatedEvent:
            // The connection's window comes back as it runs low, whatever the DATA was for: a stream holds at most
            // its own window, and DATA for a stream closed meanwhile is counted too.
            if updated.streamID == .rootStream, let left = updated.inboundWindowSize,
                let increment = window.refill(left: left)
            {
                giveBack(increment, on: .rootStream)
            }
        case is ChannelShouldQuiesceEvent:
            run(lifecycle.drainStarted())
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// A stream error `NIOHTTP2Handler` raised on one of the stream's frames (an END_STREAM that contradicts the
    /// `content-length` written, for one): it sends nothing for it and leaves the stream as it was, so the stream is
    /// reset here and ends, or its client would wait on it for good. The error goes on to be logged.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError, let stream = removeStream(streamError.streamID) {
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
        cancelTimers()
        context.fireChannelInactive()
    }

    private func removeStream(_ id: HTTP2StreamID) -> HTTP2Stream? {
        guard let stream = streams.removeValue(forKey: id) else { return nil }
        run(lifecycle.streamClosed(now: eventLoop.now))
        return stream
    }

    private func endAllStreams() {
        let ending = streams.values
        streams.removeAll()
        for stream in ending { stream.closed() }
    }

    // MARK: Idle limit and drain

    private func run(_ action: HTTP2ConnectionLifecycle.Action) {
        guard let context else { return }
        switch action {
        case .none:
            break
        case .checkIdleAgain(let deadline):
            idleTimer = schedule(.idle, at: deadline)
        case .goAwayAndClose:
            // Closed whether or not the GOAWAY got out: a client that reads nothing would keep it, and its
            // connection, waiting.
            let goAway = HTTP2Frame.FramePayload.goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: goAway)), promise: nil)
            closeAfterFlush(context)
        case .announceDrain(let pingData):
            // The highest id there is, for the streams already on their way. (With none open, swift-nio-http2 takes the
            // connection as quiesced and refuses a new stream with REFUSED_STREAM, which a client may retry elsewhere.)
            let goAway = HTTP2Frame.FramePayload.goAway(lastStreamID: .maxID, errorCode: .noError, opaqueData: nil)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: goAway)), promise: nil)
            let ping = HTTP2Frame.FramePayload.ping(HTTP2PingData(withInteger: pingData), ack: false)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: ping)), promise: nil)
            context.flush()
            graceTimer = schedule(.grace, at: eventLoop.now + drainGrace)
        case .finalGoAway(let lastStreamID, let close):
            let last = HTTP2StreamID(Int(lastStreamID))
            let goAway = HTTP2Frame.FramePayload.goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: goAway)), promise: nil)
            if close { closeAfterFlush(context) } else { context.flush() }
        case .close:
            closeAfterFlush(context)
        }
    }

    /// Flushes and closes on the next turn of the loop. The last stream of a drain closes as `NIOHTTP2Handler`
    /// takes its last frame, inside that write: the frame is not out yet, and a flush or a close there would cut into
    /// the write (swift-nio-http2's own connection manager waits a turn too). ``HTTP2FlushCoalescer`` puts out what
    /// it holds before it passes the close on.
    private func closeAfterFlush(_ context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(context, eventLoop: eventLoop)
        eventLoop.execute {
            loopBound.value.flush()
            loopBound.value.close(promise: nil)
        }
    }

    private enum Timer {
        case idle
        case grace
    }

    private func schedule(_ timer: Timer, at deadline: NIODeadline) -> Scheduled<Void> {
        let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
        return eventLoop.scheduleTask(deadline: deadline) { loopBound.value.fired(timer) }
    }

    private func fired(_ timer: Timer) {
        switch timer {
        case .idle:
            idleTimer = nil
            run(lifecycle.idleTimerFired(now: eventLoop.now))
        case .grace:
            graceTimer = nil
            run(lifecycle.graceRanOut())
        }
    }

    private func cancelTimers() {
        idleTimer?.cancel()
        idleTimer = nil
        graceTimer?.cancel()
        graceTimer = nil
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
