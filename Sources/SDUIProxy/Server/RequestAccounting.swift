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
    private let access: AccessDetails?

    /// What an access-log line says beyond the status: who asked for what, and when the request started.
    private final class AccessDetails {
        let logger: Logger
        let uri: String
        let started: NIODeadline
        let clientAddress: String?

        init(logger: Logger, uri: String, clientAddress: String?) {
            self.logger = logger
            self.uri = uri
            self.started = .now()
            self.clientAddress = clientAddress
        }
    }

    init(proxy: ProxyContext, head: HTTPRequestHead, clientAddress: @autoclosure () -> String?) {
        self.method = head.method
        self.access = proxy.accessLogger.map {
            AccessDetails(logger: $0, uri: head.uri, clientAddress: clientAddress())
        }
    }

    func record(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int, in tally: RequestTally) {
        tally.count(method: method, statusCode: Int(status.code), cacheResult: cacheResult)
        guard let access else { return }
        AccessLogEntry(
            method: method,
            path: access.uri,
            status: status,
            cacheResult: cacheResult?.rawValue,
            bytes: bytes,
            duration: .nanoseconds((NIODeadline.now() - access.started).nanoseconds),
            clientAddress: access.clientAddress
        ).log(to: access.logger)
    }
}
