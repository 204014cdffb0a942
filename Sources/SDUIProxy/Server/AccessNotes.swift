import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// What one request's access-log line says beyond its status, gathered as the request goes: who asked for what,
/// when it started by the connection's clock (its event loop's), its id, its platform once routed, and how long
/// the backend took when it was asked.
///
/// Made only when `log.access` is on or `metrics.routes` lists templates (``RequestAccounting/notes``); confined
/// to the connection's loop.
final class AccessNotes {
    /// Where the line goes; nil when only the per-route metrics need the notes.
    let logger: Logger?
    let uri: String
    let clock: any EventLoop
    let started: NIODeadline
    let clientAddress: String?
    /// The client's `X-Request-Id` when it is a sane token, else one made for the line; nil without a line.
    let requestID: String?
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
        head: HTTPRequestHead,
        clientAddress: String?,
        clock: any EventLoop
    ) {
        self.routeTally = routeTally
        self.logger = logger
        self.uri = head.uri
        self.clock = clock
        self.started = clock.now
        self.clientAddress = clientAddress
        // Only a line needs it: the per-route metrics alone make none.
        self.requestID = logger == nil ? nil : RequestID.given(in: head.headers) ?? RequestID.make()
    }

    /// Notes that the backend was asked at `start` (on ``clock``) and has answered now.
    func upstreamAnswered(since start: NIODeadline) {
        let took = Duration.nanoseconds((clock.now - start).nanoseconds)
        upstreamDuration = (upstreamDuration ?? .zero) + took
    }
}

/// Request ids: the client's own when it sent a sane one, else 16 random bytes in hex.
enum RequestID {
    /// The client's `X-Request-Id` when there is exactly one and it is 1 to 128 visible token characters; a value
    /// that could forge log fields or headers is not taken.
    static func given(in headers: HTTPHeaders) -> String? {
        let values = headers["x-request-id"]
        guard values.count == 1, let value = values.first, value.utf8.count <= 128, HTTPSyntax.isToken(value) else {
            return nil
        }
        return value
    }

    /// The id of a request sent to the backend: the client's sane one, the access line's, or a new one.
    static func of(_ head: HTTPRequestHead, notes: AccessNotes?) -> String {
        given(in: head.headers) ?? notes?.requestID ?? make()
    }

    /// A new id: 128 random bits from the system's secure generator, as 32 lower-case hex digits (as queue ids).
    static func make() -> String { WriteQueue.newID() }
}
