import NIOCore
import NIOHTTP2
import NIOSSL
import NIOTLS
import SDUIProxyCore

/// Sets up each connection of the public listener for what it speaks (`listen.tls`, `listen.http2`):
///
/// - clear text, HTTP/1.1 only: ``PublicHTTPHandler`` straight on the socket;
/// - clear text with HTTP/2: ``HTTP2PrefaceDetector`` first, then HTTP/2 by prior knowledge (h2c) or HTTP/1.1;
/// - TLS: ``TLSRecordGate``, the TLS handler, then HTTP/2 or HTTP/1.1 as ALPN decided.
///
/// Until a protocol's handlers have the connection, ``ConnectionSetupDeadline`` bounds the wait (and keeps a drain
/// that began meanwhile for them). An HTTP/2 connection is ``HTTP2FlushCoalescer`` (one flush a turn of the loop),
/// `NIOHTTP2Handler` (its settings and flood limits below), ``HTTP2Connection`` (the streams, each an
/// ``HTTP2Stream``, the idle limit and the drain) and ``HTTP2ConnectionErrorHandler``.
struct PublicConnectionPipeline: Sendable {
    let runtime: ProxyRuntime
    let responseBuffers: PerEventLoop<ResponseBufferRecycler>
    /// The loops' yielders (``BusyLoopYielding``), which the connections tell when they have flushed a read's
    /// answers; nil when the loops never yield, or are the caller's.
    let yielding: BusyLoopYielding?
    let tls: ListenerTLS?
    let protocols: ListenerProtocols
    /// The longest a drain waits for open streams before the connection is closed.
    let drainTimeout: TimeAmount

    /// Configures `channel`, on its loop. The connection is counted in `sdui_open_connections`, under `setup`
    /// until its protocol is known.
    func configure(_ channel: any Channel) throws {
        let sync = channel.pipeline.syncOperations
        let limits = runtime.context.configuration.limits
        let metrics = runtime.context.metrics
        let stage = NIOLoopBoundBox(ProxyMetrics.ConnectionStage.setup, eventLoop: channel.eventLoop)
        metrics.connectionOpened()
        channel.closeFuture.whenComplete { _ in metrics.connectionClosed(in: stage.value) }
        let pipeline = Configured(pipeline: self, stage: stage)
        if let tls {
            let setup = ConnectionSetupDeadline(timeout: limits.idleTimeout.timeAmount)
            try sync.addHandler(setup)
            try sync.addHandler(TLSRecordGate())
            try sync.addHandler(tls.makeHandler())
            try sync.addHandler(
                ApplicationProtocolNegotiationHandler { result, channel in
                    channel.eventLoop.makeCompletedFuture {
                        switch result {
                        case .negotiated("h2") where protocols.http2:
                            try pipeline.addHTTP2(to: channel, isSecure: true)
                        default:
                            try pipeline.addHTTP1(to: channel, isSecure: true)
                        }
                        setup.handOver(channel.pipeline)
                    }
                }
            )
            return
        }
        guard protocols.http2 else { return try pipeline.addHTTP1(to: channel, isSecure: false) }
        let setup = ConnectionSetupDeadline(timeout: limits.idleTimeout.timeAmount)
        try sync.addHandler(setup)
        try sync.addHandler(
            HTTP2PrefaceDetector { context, detected in
                switch detected {
                case .http1: try pipeline.addHTTP1(to: context.channel, isSecure: false, after: context.handler)
                case .http2: try pipeline.addHTTP2(to: context.channel, isSecure: false, after: context.handler)
                }
                setup.handOver(context.pipeline)
            }
        )
    }

    /// The pipeline for one connection: adding a protocol's handlers also moves the connection's count to it.
    private struct Configured: Sendable {
        let pipeline: PublicConnectionPipeline
        let stage: NIOLoopBoundBox<ProxyMetrics.ConnectionStage>

        func addHTTP1(to channel: any Channel, isSecure: Bool, after: (any ChannelHandler)? = nil) throws {
            try pipeline.addHTTP1(to: channel, isSecure: isSecure, after: after)
            speaks(.http1, overTLS: isSecure)
        }

        func addHTTP2(to channel: any Channel, isSecure: Bool, after: (any ChannelHandler)? = nil) throws {
            try pipeline.addHTTP2(to: channel, isSecure: isSecure, after: after)
            speaks(.http2, overTLS: isSecure)
        }

        private func speaks(_ clientProtocol: ClientProtocol, overTLS: Bool) {
            stage.value = ProxyMetrics.ConnectionStage(clientProtocol)
            pipeline.runtime.context.metrics.connectionSpeaks(clientProtocol, overTLS: overTLS)
        }
    }

    private func addHTTP1(to channel: any Channel, isSecure: Bool, after: (any ChannelHandler)? = nil) throws {
        let handler = PublicHTTPHandler(
            runtime: runtime,
            eventLoop: channel.eventLoop,
            buffers: responseBuffers.value(on: channel.eventLoop),
            requests: runtime.context.metrics.requestTally(for: channel.eventLoop),
            isSecure: isSecure,
            yielder: yielding?.yielder(for: channel.eventLoop)
        )
        try channel.pipeline.syncOperations.addHandler(handler, position: after.map { .after($0) } ?? .last)
    }

    private func addHTTP2(to channel: any Channel, isSecure: Bool, after: (any ChannelHandler)? = nil) throws {
        let sync = channel.pipeline.syncOperations
        // No multiplexer: the streams are HTTP2Connection's, which reads the frames with their stream ids and keeps
        // the idle limit and the drain.
        let handler = NIOHTTP2Handler(
            mode: .server,
            connectionConfiguration: Self.connectionConfiguration(protocols),
            streamConfiguration: Self.streamConfiguration()
        )
        let streams = HTTP2Connection(
            runtime: runtime,
            eventLoop: channel.eventLoop,
            requests: runtime.context.metrics.requestTally(for: channel.eventLoop),
            isSecure: isSecure,
            drainGrace: drainTimeout
        )
        let coalescer = HTTP2FlushCoalescer(yielder: yielding?.yielder(for: channel.eventLoop))
        try sync.addHandler(coalescer, position: after.map { .after($0) } ?? .last)
        try sync.addHandler(handler, position: .after(coalescer))
        try sync.addHandler(streams, position: .after(handler))
        try sync.addHandler(HTTP2ConnectionErrorHandler(logger: runtime.context.logger), position: .after(streams))
    }

    /// The connection's settings and flood limits: streams and header lists as configured, and swift-nio-http2's
    /// defences (CVE-2023-44487's rapid reset among them) at limits no honest client reaches.
    static func connectionConfiguration(_ protocols: ListenerProtocols) -> NIOHTTP2Handler.ConnectionConfiguration {
        var connection = NIOHTTP2Handler.ConnectionConfiguration()
        connection.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: protocols.maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: protocols.maxHeaderListBytes),
            HTTP2Setting(parameter: .maxFrameSize, value: 1 << 14),
            // No server push: the proxy never pushes, and says so.
            HTTP2Setting(parameter: .enablePush, value: 0),
        ]
        // A header block may span this many CONTINUATION frames; more is a flood.
        connection.maximumSequentialContinuationFrames = 5
        // swift-nio-http2 checks header blocks both ways or neither. A request's block is checked as it is read
        // (HTTP2RequestFieldRules, a malformed one resets its stream); a response's is built from fields the
        // HTTP/1.1 parser validated, and checking it again cost a fifth of an HTTP/2 hit.
        connection.headerBlockValidation = .disabled
        // PING, SETTINGS and PRIORITY floods, resets of streams already closed, other glitches: swift-nio-http2's
        // limits (200 control frames in 30 seconds, 200 glitches) stand.
        return connection
    }

    static func streamConfiguration() -> NIOHTTP2Handler.StreamConfiguration {
        var stream = NIOHTTP2Handler.StreamConfiguration()
        // Opening and resetting streams in a tight loop (rapid reset): past this many resets in the window, the
        // connection is sent GOAWAY and closed.
        stream.streamResetFrameRateLimit.maximumCount = 200
        stream.streamResetFrameRateLimit.windowLength = .seconds(30)
        return stream
    }
}
