import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Tracing

/// Records how one request ended: the request counter, the access-log line when `log.access` is on, the per-route
/// counts and the request's span.
///
/// Without notes it is a number and a nil reference, copied with each response writer: the details a log line
/// needs are only gathered (and the clock only read) when a line will be written. The counter it records into is
/// the connection's loop's.
struct RequestAccounting {
    /// The request's method and protocol as the request counter's row (``RequestTally/row(method:protocol:)``).
    private let tallyRow: Int
    private let access: AccessNotes?

    /// What the access-log line of this request will say beyond its status, as the request goes: nil without an
    /// access log, so that responders only note anything when a line will be written.
    var notes: AccessNotes? { access }

    init(
        proxy: ProxyContext,
        head: HTTPRequestHead,
        clientAddress: @autoclosure () -> String?,
        clock: @autoclosure () -> any EventLoop
    ) {
        self.tallyRow = RequestTally.row(method: head.method, protocol: ClientProtocol(head.version))
        guard proxy.takesNotes else {
            self.access = nil
            return
        }
        // A request the sampler passes over makes no span, and no notes unless a line or the route counts need them.
        let traced = proxy.tracer?.startSpan(for: head)
        if proxy.notesEveryRequest || traced != nil {
            let loop = clock()
            self.access = AccessNotes(
                logger: proxy.accessLogger,
                routeTally: proxy.routeMetrics?.tally(),
                traced: traced,
                head: head,
                clientAddress: clientAddress(),
                clock: loop
            )
        } else {
            self.access = nil
        }
    }

    func record(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int, in tally: RequestTally) {
        tally.count(row: tallyRow, statusCode: Int(status.code), cacheResult: cacheResult)
        guard let access else { return }
        let clientProtocol = access.clientProtocol
        let duration = access.clock.now - access.started
        if let series = access.routeSeries {
            access.routeTally?.count(series: series, cacheResult: cacheResult, bytes: bytes, duration: duration)
        }
        access.endSpan(status: status, cacheResult: cacheResult, bytes: bytes, protocol: clientProtocol)
        guard let logger = access.logger else { return }
        AccessLogEntry(
            method: access.method,
            path: access.uri,
            status: status,
            cacheResult: cacheResult?.rawValue,
            bytes: bytes,
            duration: .nanoseconds(duration.nanoseconds),
            upstreamDuration: access.upstreamDuration,
            clientAddress: access.clientAddress,
            clientProtocol: clientProtocol,
            platform: access.platform,
            requestID: access.requestID,
            leaderRequestID: access.leaderRequestID
        ).log(to: logger)
    }
}
