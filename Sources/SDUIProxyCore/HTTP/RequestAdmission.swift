import NIOHTTP1

/// Decides whether a request head from a client may be served at all, before anything is looked up or
/// forwarded: size limits, framing that could smuggle a second request past the backend, and targets
/// that would make the proxy an open proxy.
public enum RequestAdmission {
    /// A refused request: the error the client gets, and whether the connection must close afterwards
    /// (always, when the framing of what follows cannot be trusted).
    public struct Refusal: Error, Equatable, Sendable {
        public var error: ProxyError
        public var closeConnection: Bool
    }

    /// What admission reads of a head's fields, in one pass over them: their size and the framing fields. A
    /// function of the fields alone, so a connection whose next head has the same fields reads them once
    /// (``RepeatedRouteFields``).
    struct FieldFacts: Equatable, Sendable {
        /// The fields' bytes as admission counts them: each name and value, and four bytes a line.
        var bytes = 0
        var hostCount = 0
        /// The last `Host` value.
        var host: String?
        var lengths: [String] = []
        var transferEncodings: [String] = []

        /// The facts of `headers`, in one pass, without allocating per lookup.
        init(of headers: HTTPHeaders) {
            for (name, value) in headers {
                let nameBytes = name.utf8.count
                bytes += nameBytes + value.utf8.count + 4
                // Told apart by length first: most names have none of these three lengths.
                switch nameBytes {
                case 4 where HTTPSyntax.equalsIgnoringCase(name, "host"):
                    hostCount += 1
                    host = value
                case 14 where HTTPSyntax.equalsIgnoringCase(name, "content-length"):
                    lengths.append(value)
                case 17 where HTTPSyntax.equalsIgnoringCase(name, "transfer-encoding"):
                    transferEncodings.append(value)
                default:
                    break
                }
            }
        }
    }

    /// Checks `head` against `limits` and returns its normalised target, with what its fields were read as
    /// (`fields`, which must be `FieldFacts(of: head.headers)`, or the router's record of a repeated head's). Not
    /// public: facts of other fields would skip the framing checks.
    static func admit(
        _ head: HTTPRequestHead,
        fields: FieldFacts,
        limits: ProxyConfiguration.Limits
    ) throws(Refusal) -> RequestTarget {
        assert(fields == FieldFacts(of: head.headers), "admission given the facts of other fields")
        // Each read once: every read of a head's part goes through its shared storage, retained and released.
        let uri = head.uri
        let method = head.method
        let version = head.version
        guard uri.utf8.count <= limits.maxURLBytes else {
            throw Refusal(
                error: ProxyError(.uriTooLong, "the request target exceeds \(limits.maxURLBytes) bytes"),
                closeConnection: true
            )
        }
        guard head.headers.count <= limits.maxHeaderCount else {
            throw Refusal(
                error: ProxyError(.headersTooLarge, "more than \(limits.maxHeaderCount) header fields"),
                closeConnection: true
            )
        }
        let headerBytes = uri.utf8.count + method.rawValue.utf8.count + 12 + fields.bytes
        guard headerBytes <= limits.maxHeaderBytes else {
            throw Refusal(
                error: ProxyError(.headersTooLarge, "the header section exceeds \(limits.maxHeaderBytes) bytes"),
                closeConnection: true
            )
        }

        // Framing: anything two parsers could read differently is refused and the connection closed.
        guard fields.hostCount <= 1 else { throw smuggling("more than one Host header") }
        if version.major == 1, version.minor >= 1, fields.hostCount == 0 {
            throw smuggling("HTTP/1.1 requires a Host header")
        }
        if !fields.lengths.isEmpty, !fields.transferEncodings.isEmpty {
            throw smuggling("both Content-Length and Transfer-Encoding")
        }
        if !fields.lengths.isEmpty {
            let distinctLengths = Set(
                fields.lengths.flatMap { $0.split(separator: ",").map { $0.trimmingWhitespace() } }
            )
            guard distinctLengths.count == 1, let length = distinctLengths.first else {
                throw smuggling("conflicting Content-Length values")
            }
            guard let declared = Int(length), declared >= 0 else { throw smuggling("an invalid Content-Length") }
            guard declared <= limits.maxBodyBytes else {
                throw Refusal(
                    error: ProxyError(
                        .tooLarge,
                        "the request body exceeds limits.maxBodyBytes (\(limits.maxBodyBytes) bytes)"
                    ),
                    closeConnection: true
                )
            }
        }
        if !fields.transferEncodings.isEmpty {
            let codings = fields.transferEncodings.flatMap { $0.split(separator: ",") }.map {
                $0.trimmingWhitespace().lowercased()
            }
            guard codings.last == "chunked" else { throw smuggling("a Transfer-Encoding that does not end in chunked") }
        }

        guard !method.isCONNECT else {
            throw Refusal(
                error: ProxyError(.methodNotAllowed, "CONNECT: this is not a forward proxy"),
                closeConnection: false
            )
        }
        return try target(of: uri, host: fields.host)
    }

    /// The origin-form target of `uri`; an absolute-form target is accepted only for this proxy's own host.
    static func target(of uri: String, host: String?) throws(Refusal) -> RequestTarget {
        var path = uri
        // The first byte, not `hasPrefix`, which compares characters (about 230 instructions a request): a target
        // is visible ASCII by now, and HTTP's origin form is a byte.
        if uri.utf8.first != UInt8(ascii: "/") {
            guard let url = AbsoluteURL(parsing: uri) else {
                throw Refusal(
                    error: ProxyError(.url, "the request target must be a path starting with /"),
                    closeConnection: false
                )
            }
            let defaultPort = url.scheme == "https" ? 443 : 80
            let authority = host?.lowercased() ?? ""
            guard authority == "\(url.host):\(url.port)" || (authority == url.host && url.port == defaultPort) else {
                throw Refusal(
                    error: ProxyError(
                        .badRequest,
                        "absolute-form targets for other hosts are refused: this is not an open proxy"
                    ),
                    closeConnection: false
                )
            }
            path = url.query.map { url.path + "?" + $0 } ?? url.path
        }
        do {
            return try RequestTarget(parsing: path)
        } catch {
            throw Refusal(error: ProxyError(.url, error.reason), closeConnection: false)
        }
    }

    private static func smuggling(_ reason: String) -> Refusal {
        Refusal(error: ProxyError(.badRequest, "refused: \(reason)"), closeConnection: true)
    }
}
