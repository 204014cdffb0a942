import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Records how one request ended: the request counter, and the access-log line when `log.access` is on.
struct RequestAccounting {
    let metrics: ProxyMetrics
    let accessLogger: Logger?
    let method: HTTPMethod
    let uri: String
    let started: NIODeadline
    let clientAddress: String?

    init(proxy: ProxyContext, head: HTTPRequestHead, clientAddress: @autoclosure () -> String?) {
        self.metrics = proxy.metrics
        self.accessLogger = proxy.accessLogger
        self.method = head.method
        self.uri = head.uri
        self.started = .now()
        // The address is only looked up when a line will be written.
        self.clientAddress = proxy.accessLogger == nil ? nil : clientAddress()
    }

    func record(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int) {
        metrics.requestCompleted(method: method, statusCode: Int(status.code), cacheResult: cacheResult)
        guard let accessLogger else { return }
        AccessLogEntry(
            method: method,
            path: uri,
            status: status,
            cacheResult: cacheResult?.rawValue,
            bytes: bytes,
            duration: .nanoseconds((NIODeadline.now() - started).nanoseconds),
            clientAddress: clientAddress
        ).log(to: accessLogger)
    }
}
