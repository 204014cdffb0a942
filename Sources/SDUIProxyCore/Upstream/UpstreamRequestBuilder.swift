import NIOHTTP1

/// Builds the URL and headers of an upstream request from the client's request, the way Beagle's
/// `HttpRequestBuilder` does on the device: the platform header and the configured headers are added, and the
/// client's end-to-end headers travel with it.
public struct UpstreamRequestBuilder: Sendable {
    /// What the builder adds to every request.
    public let platformHeader: String
    public let configuredHeaders: [(name: String, value: String)]

    public init(platformHeader: String, configuredHeaders: [(name: String, value: String)]) {
        self.platformHeader = platformHeader
        self.configuredHeaders = configuredHeaders
    }

    /// Which request the headers are for.
    public enum Purpose: Sendable {
        /// A component fetch whose answer may be stored: the proxy asks for the whole, unencoded
        /// representation, so the client's conditional, range and encoding headers are left out.
        case cacheFill
        /// A request forwarded as the client sent it.
        case passThrough
    }

    /// Headers the proxy never forwards for a cache fill.
    static let cacheFillExcludedHeaders: [StaticString] = [
        "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range", "range",
        "accept-encoding", "beagle-hash", "content-length",
    ]

    /// The upstream headers for a client request.
    ///
    /// - Hop-by-hop headers, and those the client's `Connection` header names, are dropped; so are `Host`
    ///   (the client library sets the backend's) and the client's platform header (replaced by `platform`).
    /// - Configured headers replace the client's values, except `Content-Type` when the client sent one:
    ///   its body is encoded the way it says.
    /// - `Via` and `X-Forwarded-For` record the hop.
    public func headers(
        from clientHeaders: HTTPHeaders,
        platform: String,
        clientAddress: String?,
        purpose: Purpose
    ) -> HTTPHeaders {
        // Every header is checked against fixed lists without allocating; only a `Connection` header naming
        // further fields costs a list of its own.
        let endToEnd = EndToEndFilter(clientHeaders)
        // Everything is gathered as a list and handed to `HTTPHeaders` whole: its `add` and `replaceOrAdd` walk
        // the headers, check the name again and retain each name and value again.
        var forwarded: [(String, String)] = []
        forwarded.reserveCapacity(clientHeaders.count + configuredHeaders.count + 4)
        var forwardedFor: String?
        var clientSentContentType = false
        for (name, value) in clientHeaders {
            if !endToEnd.passes(name) || HTTPSyntax.equalsIgnoringCase(name, "host")
                || HTTPSyntax.sameIgnoringCase(name, platformHeader)
            {
                continue
            }
            if purpose == .cacheFill,
                Self.cacheFillExcludedHeaders.contains(where: { HTTPSyntax.equalsIgnoringCase(name, $0) })
            {
                continue
            }
            if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-for") {
                // Every hop so far, in order, then this one (below).
                forwardedFor = forwardedFor.map { $0 + ", " + value } ?? value
                continue
            }
            if HTTPSyntax.equalsIgnoringCase(name, "content-type") { clientSentContentType = true }
            forwarded.append((name, value))
        }
        for (name, value) in configuredHeaders {
            // Set below, whatever is configured.
            if HTTPSyntax.sameIgnoringCase(name, platformHeader)
                || (purpose == .cacheFill && HTTPSyntax.equalsIgnoringCase(name, "accept-encoding"))
            {
                continue
            }
            if HTTPSyntax.equalsIgnoringCase(name, "content-type"), clientSentContentType { continue }
            if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-for") {
                forwardedFor = value
                continue
            }
            forwarded.removeAll { HTTPSyntax.sameIgnoringCase($0.0, name) }
            forwarded.append((name, value))
        }
        forwarded.append((platformHeader, platform))
        if purpose == .cacheFill { forwarded.append(("Accept-Encoding", "identity")) }
        forwarded.append(("Via", "1.1 sdui-proxy"))
        if let clientAddress {
            forwarded.append(("X-Forwarded-For", forwardedFor.map { $0 + ", " + clientAddress } ?? clientAddress))
        } else if let forwardedFor {
            forwarded.append(("X-Forwarded-For", forwardedFor))
        }
        // Names come from a parsed request, the configuration (both checked as tokens) and literals: ASCII, as
        // `HTTPHeaders` requires.
        return HTTPHeaders(forwarded)
    }

    /// The headers of a backend response as the proxy passes them on: without hop-by-hop headers and those
    /// its `Connection` header names. Framing (`Content-Length`, `Transfer-Encoding`) is set by the proxy.
    public static func endToEndResponseHeaders(_ headers: HTTPHeaders) -> HTTPHeaders {
        let filter = EndToEndFilter(headers)
        // Gathered as a list and handed over whole: `HTTPHeaders.add` would retain each name and value again.
        var result: [(String, String)] = []
        result.reserveCapacity(headers.count + 1)
        for (name, value) in headers where filter.passes(name) {
            result.append((name, value))
        }
        return HTTPHeaders(result)
    }

    /// Which of a message's headers travel end to end: those that are not hop-by-hop and that its `Connection`
    /// header does not name.
    public struct EndToEndFilter: Sendable {
        private let named: [String]

        public init(_ headers: HTTPHeaders) {
            var tokens: [String] = []
            for value in headers["connection"] {
                value.withContiguousUTF8 {
                    UpstreamRequestBuilder.readConnectionTokens(UnsafeRawBufferPointer($0), into: &tokens)
                }
            }
            named = tokens
        }

        public init(_ fields: HTTPFieldLines) {
            var tokens: [String] = []
            fields.forEachValue(of: "connection") { UpstreamRequestBuilder.readConnectionTokens($0, into: &tokens) }
            named = tokens
        }

        public func passes(_ name: String) -> Bool {
            !HTTPSyntax.isHopByHop(name) && !named.contains { HTTPSyntax.sameIgnoringCase(name, $0) }
        }

        /// ``passes(_:)`` for a name read in place.
        public func passes(_ name: UnsafeRawBufferPointer) -> Bool {
            !HTTPSyntax.isHopByHop(name) && !named.contains { HTTPSyntax.sameIgnoringCase(bytes: name, $0) }
        }
    }

    /// The field names one `Connection` value lists (RFC 9110 section 7.6.1), added to `tokens`; usually none
    /// beyond `keep-alive` or `close`, which are hop-by-hop anyway and need no splitting (this runs for every
    /// backend answer).
    fileprivate static func readConnectionTokens(_ value: UnsafeRawBufferPointer, into tokens: inout [String]) {
        if HTTPSyntax.equalsIgnoringCase(bytes: value, "keep-alive")
            || HTTPSyntax.equalsIgnoringCase(bytes: value, "close")
        {
            return
        }
        for token in value.split(separator: UInt8(ascii: ",")) {
            let trimmed = HTTPSyntax.trimmingOptionalWhitespace(token)
            guard !trimmed.isEmpty else { continue }
            let name = String(decoding: trimmed, as: UTF8.self)
            if !HTTPSyntax.isHopByHop(name) { tokens.append(name) }
        }
    }
}
