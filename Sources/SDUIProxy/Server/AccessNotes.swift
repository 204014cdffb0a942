import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Tracing

/// What one request's access-log line and span say beyond its status, gathered as the request goes: who asked for
/// what, when it started by the connection's clock (its event loop's), its id, its platform once routed, how long
/// the backend took when it was asked, and whose fill answered it when it waited for another's.
///
/// Made only when `log.access` is on, `metrics.routes` lists templates or tracing is on
/// (``RequestAccounting/notes``); confined to the connection's loop.
final class AccessNotes {
    /// Where the line goes; nil when only the per-route metrics need the notes.
    let logger: Logger?
    let method: HTTPMethod
    let clientProtocol: ClientProtocol
    let uri: String
    let clock: any EventLoop
    let started: NIODeadline
    let clientAddress: String?
    /// The client's `X-Request-Id` when it is a sane token, else one made for the line or the span; nil without
    /// either.
    let requestID: String?
    /// The request's server span, when it is traced, and the tracer that writes its context into requests to
    /// the backend.
    var span: (any Span)? { traced?.span }
    let traced: RequestSpan?
    /// Whether there is a span that has not ended yet (``endSpan(status:cacheResult:bytes:protocol:)``); the
    /// `deinit` ends one that is still open.
    private var spanOpen: Bool
    /// The id of the request whose fill answered this one, when it waited for another's (a coalesced miss).
    private(set) var leaderRequestID: String?
    /// Whether this request waited for another's fill.
    private(set) var coalesced = false
    /// The platform the request was routed for; nil for a request refused before routing.
    var platform: String?
    /// The time the backend took, summed over the requests sent to it for this one.
    private(set) var upstreamDuration: Duration?
    /// The per-route series the response counts in, once routed; and the loop's tally it counts in.
    var routeSeries: Int?
    let routeTally: RouteTally?

    init(
        logger: Logger?,
        routeTally: RouteTally?,
        traced: RequestSpan?,
        head: HTTPRequestHead,
        clientAddress: String?,
        clock: any EventLoop
    ) {
        self.routeTally = routeTally
        self.logger = logger
        self.method = head.method
        self.clientProtocol = ClientProtocol(head.version)
        self.uri = head.uri
        self.clock = clock
        self.started = clock.now
        self.clientAddress = clientAddress
        self.traced = traced
        self.spanOpen = traced != nil
        // Only a line or a recorded span needs it: the per-route metrics alone make none.
        let needsID = logger != nil || traced?.span.isRecording == true
        self.requestID = needsID ? RequestID.given(in: head.headers) ?? RequestID.make() : nil
    }

    /// A span must end, or its tracer holds it: a request that is never recorded (its connection dropped before
    /// an answer began) ends its span when its notes go.
    deinit {
        guard spanOpen, let span else { return }
        span.setStatus(SpanStatus(code: .error, message: "the request ended without an answer"))
        span.end()
    }

    /// Notes that this request took the outcome of `leader`'s fill rather than making one: its line names the
    /// leader, its span links to the leader's.
    func tookFill(of leader: FillLeader) {
        coalesced = true
        leaderRequestID = leader.requestID
        guard let span, span.isRecording, let trace = leader.trace else { return }
        span.addLink(SpanLink(context: trace, attributes: [:]))
    }

    /// Ends the span with how the request ended; later calls do nothing.
    func endSpan(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int, protocol: ClientProtocol) {
        guard spanOpen, let span else { return }
        spanOpen = false
        if span.isRecording {
            span.updateAttributes { attributes in
                attributes["http.response.status_code"] = Int(status.code)
                attributes["http.response.body.size"] = bytes
                attributes["network.protocol.name"] = "http"
                attributes["network.protocol.version"] = `protocol` == .http2 ? "2" : "1.1"
                if let clientAddress { attributes["client.address"] = clientAddress }
                if let requestID { attributes["sdui.request_id"] = requestID }
                if let cacheResult { attributes["sdui.cache_result"] = cacheResult.rawValue }
                if let platform { attributes["sdui.platform"] = platform }
                if let upstreamDuration {
                    attributes["sdui.upstream_ms"] = AccessLogEntry.milliseconds(upstreamDuration)
                }
                attributes["sdui.coalesced"] = coalesced
                if let leaderRequestID { attributes["sdui.leader_request_id"] = leaderRequestID }
            }
            if status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
        }
        span.end()
    }

    /// Notes that the backend was asked at `start` (on ``clock``) and has answered now.
    func upstreamAnswered(since start: NIODeadline) {
        let took = Duration.nanoseconds((clock.now - start).nanoseconds)
        upstreamDuration = (upstreamDuration ?? .zero) + took
    }
}
