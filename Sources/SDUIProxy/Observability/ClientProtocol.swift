import NIOHTTP1

/// The protocol a client speaks to the public listener, as the metrics and the access log name it.
public enum ClientProtocol: Int, Sendable, CaseIterable {
    /// HTTP/1.1 (and 1.0), over TLS or not.
    case http1
    /// HTTP/2: by ALPN over TLS, or by prior knowledge in clear text.
    case http2

    /// The protocol of a request of `version`.
    init(_ version: HTTPVersion) {
        self = version.major >= 2 ? .http2 : .http1
    }

    /// The value of the metrics' `protocol` label and the access log's `protocol` field.
    public var label: String {
        switch self {
        case .http1: "http/1.1"
        case .http2: "h2"
        }
    }
}
