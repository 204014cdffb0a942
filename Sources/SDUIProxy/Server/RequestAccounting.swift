import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Records how one request ended: the request counter, and the access-log line when `log.access` is on.
///
/// Without an access log it is the method and a nil reference, copied with each response writer: the details a
/// log line needs are only gathered (and the clock only read) when a line will be written. The counter it
/// records into is the connection's loop's.
struct RequestAccounting {
    let method: HTTPMethod
    let clientProtocol: ClientProtocol
    private let access: AccessDetails?

    /// What an access-log line says beyond the status: who asked for what, and when the request started by the
    /// connection's clock (its event loop's).
    private final class AccessDetails {
        let logger: Logger
        let uri: String
        let clock: any EventLoop
        let started: NIODeadline
        let clientAddress: String?

        init(logger: Logger, uri: String, clientAddress: String?, clock: any EventLoop) {
            self.logger = logger
            self.uri = uri
            self.clock = clock
            self.started = clock.now
            self.clientAddress = clientAddress
        }
    }

    init(
        proxy: ProxyContext,
        head: HTTPRequestHead,
        clientAddress: @autoclosure () -> String?,
        clock: @autoclosure () -> any EventLoop
    ) {
        self.method = head.method
        self.clientProtocol = ClientProtocol(head.version)
        self.access = proxy.accessLogger.map {
            AccessDetails(logger: $0, uri: head.uri, clientAddress: clientAddress(), clock: clock())
        }
    }

    func record(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int, in tally: RequestTally) {
        tally.count(method: method, statusCode: Int(status.code), cacheResult: cacheResult, protocol: clientProtocol)
        guard let access else { return }
        AccessLogEntry(
            method: method,
            path: access.uri,
            status: status,
            cacheResult: cacheResult?.rawValue,
            bytes: bytes,
            duration: .nanoseconds((access.clock.now - access.started).nanoseconds),
            clientAddress: access.clientAddress,
            clientProtocol: clientProtocol
        ).log(to: access.logger)
    }
}
