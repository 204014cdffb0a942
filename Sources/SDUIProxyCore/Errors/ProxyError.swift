import NIOCore
import NIOHTTP1

/// An error the proxy itself produces, as opposed to an error status the backend sent (which is passed through).
///
/// Every `ProxyError` becomes exactly one HTTP response: ``status`` and the JSON body from ``jsonBody()``,
/// `{"error": {"kind": "...", "message": "...", "retryable": true|false}}`. This is the one place where
/// errors are mapped to HTTP.
///
/// ``message`` is what the client reads: short, and free of addresses, paths and library internals.
/// ``detail`` holds those (the underlying error, the backend's address, an errno) for the log only: it is in
/// ``description``, never in ``jsonBody()``.
public struct ProxyError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, in the vocabulary clients see in the `kind` field.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Code: String, Hashable, Sendable {
            case network
            case timeout
            case decoding
            case url
            case badRequest
            case tooLarge
            case unavailable
            case notFound
            case methodNotAllowed
            case unauthorized
            case internalError
            case upstreamTooLarge
            case fillBudgetFull
            case uriTooLong
            case headersTooLarge
            case requestTimeout
            case notCached
            case conflict
        }

        fileprivate let code: Code

        /// The backend could not be reached, or the connection broke.
        public static let network = Kind(code: .network)
        /// The backend did not answer in time.
        public static let timeout = Kind(code: .timeout)
        /// The backend's answer is not a valid component.
        public static let decoding = Kind(code: .decoding)
        /// No upstream URL can be built from the request target.
        public static let url = Kind(code: .url)
        /// The client's request is malformed or not allowed.
        public static let badRequest = Kind(code: .badRequest)
        /// A request or response exceeds a configured size limit.
        public static let tooLarge = Kind(code: .tooLarge)
        /// The proxy is shutting down or overloaded.
        public static let unavailable = Kind(code: .unavailable)
        /// No such route (admin listener).
        public static let notFound = Kind(code: .notFound)
        /// The route exists but not for this method (admin listener).
        public static let methodNotAllowed = Kind(code: .methodNotAllowed)
        /// Missing or wrong credentials (admin listener).
        public static let unauthorized = Kind(code: .unauthorized)
        /// The request clashes with one the proxy holds already (a local identifier being created twice).
        public static let conflict = Kind(code: .conflict)
        /// The backend's response is larger than the proxy reads into memory (`upstream.maxResponseBytes`).
        public static let upstreamTooLarge = Kind(code: .upstreamTooLarge)
        /// Cache fills already hold all the response bytes `upstream.maxBufferedBytes` allows; a later fill fits.
        public static let fillBudgetFull = Kind(code: .fillBudgetFull)
        /// The request target is longer than `limits.maxURLBytes`.
        public static let uriTooLong = Kind(code: .uriTooLong)
        /// The request's header section exceeds `limits.maxHeaderBytes` or `limits.maxHeaderCount`.
        public static let headersTooLarge = Kind(code: .headersTooLarge)
        /// The client did not send its whole request within `limits.requestTimeout`.
        public static let requestTimeout = Kind(code: .requestTimeout)
        /// The client asked for a stored answer only (`only-if-cached`), and none is stored that may serve it.
        public static let notCached = Kind(code: .notCached)
        /// A bug or an unexpected condition inside the proxy.
        public static let internalError = Kind(code: .internalError)

        public var description: String { code.rawValue }
    }

    public var kind: Kind
    /// What the client reads.
    public var message: String
    /// What only the log reads: the underlying error in full. Not part of equality.
    public var detail: String?

    public init(_ kind: Kind, _ message: String, detail: String? = nil) {
        self.kind = kind
        self.message = message
        self.detail = detail
    }

    public static func == (lhs: ProxyError, rhs: ProxyError) -> Bool {
        lhs.kind == rhs.kind && lhs.message == rhs.message
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        hasher.combine(message)
    }

    /// The status the client receives for this error.
    public var status: HTTPResponseStatus {
        switch kind.code {
        case .network, .decoding, .upstreamTooLarge: .badGateway
        case .timeout, .notCached: .gatewayTimeout
        case .url, .badRequest: .badRequest
        case .tooLarge: .payloadTooLarge
        case .unavailable, .fillBudgetFull: .serviceUnavailable
        case .notFound: .notFound
        case .methodNotAllowed: .methodNotAllowed
        case .unauthorized: .unauthorized
        case .internalError: .internalServerError
        case .uriTooLong: .uriTooLong
        case .headersTooLarge: HTTPResponseStatus(statusCode: 431, reasonPhrase: "Request Header Fields Too Large")
        case .requestTimeout: .requestTimeout
        case .conflict: .conflict
        }
    }

    /// Whether the same request has a chance of succeeding if the client tries again later.
    public var isRetryable: Bool {
        switch kind.code {
        case .network, .timeout, .unavailable, .requestTimeout, .fillBudgetFull: true
        case .decoding, .url, .badRequest, .tooLarge, .notFound, .methodNotAllowed, .unauthorized, .internalError,
            .upstreamTooLarge, .uriTooLong, .headersTooLarge, .notCached, .conflict:
            false
        }
    }

    /// The JSON error body of the error model.
    public func jsonBody() -> String {
        #"{"error":{"kind":"\#(kind)","message":\#(JSONText.quoted(message)),"retryable":\#(isRetryable)}}"#
    }

    /// The log's form: kind, message and, when there is one, the detail.
    public var description: String {
        guard let detail else { return "\(kind): \(message)" }
        return "\(kind): \(message) (\(detail))"
    }
}

/// Small helpers to write JSON text without an encoder, for bodies the proxy builds itself.
public enum JSONText {
    /// `value` as a JSON string literal, quotes included.
    public static func quoted(_ value: String) -> String {
        var result = "\""
        result.reserveCapacity(value.utf8.count + 2)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: result.unicodeScalars.append(scalar)
            }
        }
        result += "\""
        return result
    }
}
