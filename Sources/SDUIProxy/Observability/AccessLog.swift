import Logging
import NIOHTTP1

/// One answered request, as the access log records it.
///
/// ``log(to:)`` writes it as a single info-level line whose fields are metadata, so the JSON log format
/// carries them as JSON fields (`"status":200`, `"duration_ms":0.412`) and the text format as `key=value`.
public struct AccessLogEntry: Sendable, Equatable {
    /// The request method.
    public var method: HTTPMethod
    /// The request target as the client sent it (path and query).
    public var path: String
    /// The status of the response.
    public var status: HTTPResponseStatus
    /// How the cache took part: `HIT`, `MISS`, `BYPASS`, `STALE`, `REVALIDATED`; nil for pass-through.
    public var cacheResult: String?
    /// Response body bytes sent.
    public var bytes: Int
    /// From the request head's arrival to the response's end.
    public var duration: Duration
    /// The time spent waiting for the backend, when the request went to the backend.
    public var upstreamDuration: Duration?
    /// The client's IP address.
    public var clientAddress: String?
    /// The protocol the request came in on: `http/1.1` or `h2`.
    public var clientProtocol: ClientProtocol
    /// The platform the request was routed for (`IOS`); nil for a request refused before routing.
    public var platform: String?
    /// The request's id: the client's `X-Request-Id`, or one made for it.
    public var requestID: String?
    /// The id of the request whose fill answered this one, when it waited for another's (a coalesced miss).
    public var leaderRequestID: String?

    /// Creates an entry; see the properties for what each value means.
    public init(
        method: HTTPMethod,
        path: String,
        status: HTTPResponseStatus,
        cacheResult: String? = nil,
        bytes: Int,
        duration: Duration,
        upstreamDuration: Duration? = nil,
        clientAddress: String? = nil,
        clientProtocol: ClientProtocol = .http1,
        platform: String? = nil,
        requestID: String? = nil,
        leaderRequestID: String? = nil
    ) {
        self.method = method
        self.path = path
        self.status = status
        self.cacheResult = cacheResult
        self.bytes = bytes
        self.duration = duration
        self.upstreamDuration = upstreamDuration
        self.clientAddress = clientAddress
        self.clientProtocol = clientProtocol
        self.platform = platform
        self.requestID = requestID
        self.leaderRequestID = leaderRequestID
    }

    /// The line's message; the fields are in the metadata.
    public static let message: Logger.Message = "request"

    /// The fields of the line: `method`, `path`, `protocol`, `status`, `bytes`, `duration_ms`, and when known
    /// `request_id`, `platform`, `cache`, `upstream_ms`, `client` and `leader_request_id`.
    public var metadata: Logger.Metadata {
        var metadata: Logger.Metadata = [
            "method": .string(method.rawValue),
            "path": .string(Self.printable(path)),
            "protocol": .string(clientProtocol.label),
            "status": .stringConvertible(Int(status.code)),
            "bytes": .stringConvertible(bytes),
            "duration_ms": .stringConvertible(Self.milliseconds(duration)),
        ]
        if let cacheResult { metadata["cache"] = .string(cacheResult) }
        if let upstreamDuration { metadata["upstream_ms"] = .stringConvertible(Self.milliseconds(upstreamDuration)) }
        if let clientAddress { metadata["client"] = .string(clientAddress) }
        if let platform { metadata["platform"] = .string(platform) }
        if let requestID { metadata["request_id"] = .string(requestID) }
        if let leaderRequestID { metadata["leader_request_id"] = .string(leaderRequestID) }
        return metadata
    }

    /// Writes the entry to `logger` as one info-level line.
    public func log(to logger: Logger) {
        logger.info(Self.message, metadata: metadata)
    }

    /// `duration` in milliseconds, rounded to the microsecond.
    static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        return Double(microseconds) / 1000
    }

    /// `text` with control characters percent-encoded, so a hostile target cannot forge lines in text logs.
    static func printable(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                result += hex.count == 1 ? "%0" + hex : "%" + hex
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
