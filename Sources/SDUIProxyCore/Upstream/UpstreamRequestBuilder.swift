import NIOHTTP1

/// Builds the URL and headers of an upstream request from the client's request, the way Beagle's
/// `HttpRequestBuilder` does on the device: the platform header and the configured headers are added, and the
/// client's end-to-end headers travel with it.
public struct UpstreamRequestBuilder: Sendable {
    /// What the builder adds to every request.
    public let platformHeader: String
    public let configuredHeaders: [(name: String, value: String)]
    /// Whether the configured headers set `X-Request-Id`: only then, or when the client sent one, can the fields
    /// built have one for the request's own id to replace.
    public let configuresRequestID: Bool
    /// This builder's, and its copies': what tells the fields it built from those another configuration's
    /// builder built (``RepeatedUpstreamFields``). Sound because what the builder holds is all `let`, set when it is
    /// made: a property that could change would have to be compared as an input instead.
    let identity = Identity()

    /// A builder's identity: compared by reference.
    final class Identity: Sendable {}

    public init(platformHeader: String, configuredHeaders: [(name: String, value: String)]) {
        self.platformHeader = platformHeader
        self.configuredHeaders = configuredHeaders
        self.configuresRequestID = configuredHeaders.contains { HTTPSyntax.equalsIgnoringCase($0.name, "x-request-id") }
    }

    /// Whether fields built from a client's request whose fields the router noted as `noted` (nil: not noted) may
    /// hold an `X-Request-Id`.
    public func mayCarryRequestID(noted: RequestFieldPresence?) -> Bool {
        configuresRequestID || noted?.contains(.requestID) ?? true
    }

    /// Which request the headers are for.
    public enum Purpose: Sendable {
        /// A component fetch whose answer may be stored: the proxy asks for the whole, unencoded
        /// representation, so the client's conditional, range and encoding headers are left out.
        case cacheFill
        /// A request forwarded as the client sent it.
        case passThrough
    }

    /// How a request reached the proxy, as `Via` and the forwarding fields tell the backend: the protocol version
    /// received (RFC 9110 section 7.6.3) and whether it came over TLS.
    public struct Received: Sendable, Equatable {
        public var version: HTTPVersion
        /// Over TLS: `X-Forwarded-Proto` and `Forwarded`'s `proto=` say `https`.
        public var isSecure: Bool

        public init(version: HTTPVersion, isSecure: Bool) {
            self.version = version
            self.isSecure = isSecure
        }

        /// Clear-text HTTP/1.1: what the proxy's own requests (prefetches, warm-up) say.
        public static let http1_1 = Received(version: .http1_1, isSecure: false)

        /// `Via`'s value: the version as RFC 9110 writes it (`2` for HTTP/2), then this proxy's name.
        var via: String {
            switch (version.major, version.minor) {
            case (1, 1): "1.1 sdui-proxy"
            case (1, 0): "1.0 sdui-proxy"
            case (2, _): "2 sdui-proxy"
            case (3, _): "3 sdui-proxy"
            case (let major, let minor): "\(major).\(minor) sdui-proxy"
            }
        }
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
    /// - `Via` records the hop. The forwarding fields (`X-Forwarded-For`, `-Proto`, `-Host`, `Forwarded`) say
    ///   what the proxy saw: the client's own are dropped, since a client could otherwise make the backend
    ///   build links to a host of its choosing into a response every client then gets from the cache. Only
    ///   when `clientIsTrustedProxy` (the connection comes from `listen.trustedProxies`) are the client's kept
    ///   and this hop appended.
    /// - `X-Forwarded-Host` (and `host=` in `Forwarded`) carries the client's `Host`: always when passed
    ///   through, on a cache fill only when `hostIsKeyed` (the route's `vary` lists `Host`), because a stored
    ///   answer is shared by every Host that asks for the same target.
    ///
    /// They are built as the bytes the request is sent with. As a collection, each name and value was retained
    /// and handed out again by every step after (the request id, the framing, the encoder, which walked them
    /// twice); as bytes a pass-through GET costs 2,500 instructions less. ``HTTPFieldLines/headers`` gives them
    /// as a collection where one is needed (the write queue stores them so).
    ///
    /// `noted` is what the router noted of `clientHeaders` as it walked them (nil: each field is looked for in
    /// `clientHeaders`); it must name every noted field they hold.
    ///
    /// With `repeated`, the connection's last fields are handed out again when they were built from the same
    /// (``RepeatedUpstreamFields``), and the fields built are kept there when they were not.
    public func fields(
        from clientHeaders: HTTPHeaders,
        noted: RequestFieldPresence? = nil,
        platform: String,
        clientAddress: String?,
        purpose: Purpose,
        clientIsTrustedProxy: Bool = false,
        hostIsKeyed: Bool = false,
        received: Received = .http1_1,
        reusing repeated: RepeatedUpstreamFields? = nil
    ) -> HTTPFieldLines {
        if let repeated,
            let same = repeated.fields(
                builtBy: identity,
                from: clientHeaders,
                noted: noted,
                platform: platform,
                clientAddress: clientAddress,
                purpose: purpose,
                clientIsTrustedProxy: clientIsTrustedProxy,
                hostIsKeyed: hostIsKeyed,
                received: received
            )
        {
            return same
        }
        let fields = build(
            from: clientHeaders,
            noted: noted,
            platform: platform,
            clientAddress: clientAddress,
            purpose: purpose,
            clientIsTrustedProxy: clientIsTrustedProxy,
            hostIsKeyed: hostIsKeyed,
            received: received
        )
        guard let repeated else { return fields }
        // The inputs are made into one value only here, when there is somewhere to keep them.
        return repeated.keep(
            fields,
            builtFrom: RepeatedUpstreamFields.Inputs(
                builder: identity,
                clientHeaders: clientHeaders,
                noted: noted,
                platform: platform,
                clientAddress: clientAddress,
                purpose: purpose,
                clientIsTrustedProxy: clientIsTrustedProxy,
                hostIsKeyed: hostIsKeyed,
                received: received
            )
        )
    }

    private func build(
        from clientHeaders: HTTPHeaders,
        noted: RequestFieldPresence?,
        platform: String,
        clientAddress: String?,
        purpose: Purpose,
        clientIsTrustedProxy: Bool,
        hostIsKeyed: Bool,
        received: Received
    ) -> HTTPFieldLines {
        assert(
            noted?.cover(clientHeaders) ?? true,
            "the fields noted are not those of the headers"
        )
        let forwardsHost = purpose == .passThrough || hostIsKeyed
        // Every header is checked against fixed lists without allocating; only a `Connection` header naming
        // further fields costs a list of its own, and only a request the router saw send one is searched for it.
        let sentConnection = noted?.contains(.connection) ?? true
        let endToEnd = sentConnection ? EndToEndFilter(clientHeaders) : EndToEndFilter()
        // Room for the fields added below (at most seven) and the request id the caller stamps after, and for the
        // bytes of a usual request's.
        var forwarded = HTTPFieldLines(
            reservingFields: clientHeaders.count + configuredHeaders.count + 8,
            bytes: 256 + 48 * clientHeaders.count
        )
        var forwardedFor: String?
        var forwardedElements: String?
        var host: String?
        // Set by a trusted proxy or the configuration: then the proxy does not add its own.
        var protoIsSet = false
        var forwardedHostIsSet = false
        var clientSentContentType = false
        for (name, value) in clientHeaders {
            if HTTPSyntax.equalsIgnoringCase(name, "host") {
                host = value
                continue
            }
            if !endToEnd.passes(name) || HTTPSyntax.sameIgnoringCase(name, platformHeader) {
                continue
            }
            if purpose == .cacheFill,
                Self.cacheFillExcludedHeaders.contains(where: { HTTPSyntax.equalsIgnoringCase(name, $0) })
            {
                continue
            }
            if Self.isForwardingField(name) {
                guard clientIsTrustedProxy else { continue }
                if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-for") {
                    // Every hop so far, in order, then this one (below).
                    forwardedFor = forwardedFor.map { $0 + ", " + value } ?? value
                    continue
                }
                if HTTPSyntax.equalsIgnoringCase(name, "forwarded") {
                    // Its elements may carry `host=`, which a fill must not send unkeyed; X-Forwarded-For still
                    // carries the chain of addresses.
                    guard forwardsHost else { continue }
                    forwardedElements = forwardedElements.map { $0 + ", " + value } ?? value
                    continue
                }
                if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-host") {
                    guard forwardsHost else { continue }
                    forwardedHostIsSet = true
                }
                if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-proto") { protoIsSet = true }
            }
            if HTTPSyntax.equalsIgnoringCase(name, "content-type") { clientSentContentType = true }
            forwarded.add(name: name, value: value)
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
            if HTTPSyntax.equalsIgnoringCase(name, "forwarded") {
                forwardedElements = value
                continue
            }
            if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-proto") { protoIsSet = true }
            if HTTPSyntax.equalsIgnoringCase(name, "x-forwarded-host") { forwardedHostIsSet = true }
            forwarded.replaceOrAdd(name: name, value: value)
        }
        forwarded.add(name: platformHeader, value: platform)
        // Literal names (and values) as `StaticString`: a `String` literal took the path that reads a string's
        // bytes through a closure, about 50 instructions a field.
        if purpose == .cacheFill {
            forwarded.add(name: "Accept-Encoding" as StaticString, value: "identity" as StaticString)
        }
        forwarded.add(name: "Via" as StaticString, value: received.via)
        if let clientAddress {
            forwarded.add(
                name: "X-Forwarded-For" as StaticString,
                value: forwardedFor.map { $0 + ", " + clientAddress } ?? clientAddress
            )
        } else if let forwardedFor {
            forwarded.add(name: "X-Forwarded-For" as StaticString, value: forwardedFor)
        }
        let hostSent = forwardsHost ? host : nil
        if !protoIsSet {
            let proto: StaticString = received.isSecure ? "https" : "http"
            forwarded.add(name: "X-Forwarded-Proto" as StaticString, value: proto)
        }
        if !forwardedHostIsSet, let hostSent {
            forwarded.add(name: "X-Forwarded-Host" as StaticString, value: hostSent)
        }
        if let forwardedElements {
            // A trusted proxy's chain, then this hop: rare enough to be joined as strings.
            let element = Self.forwardedElement(for: clientAddress, host: hostSent, secure: received.isSecure)
            forwarded.add(name: "Forwarded", value: forwardedElements + ", " + element)
        } else {
            Self.appendForwarded(to: &forwarded, for: clientAddress, host: hostSent, secure: received.isSecure)
        }
        return forwarded
    }

    /// Whether `name` is a field that says where a request came from: `Forwarded`, `X-Forwarded-*` or
    /// `X-Real-IP`, also spelled with `_` for `-` (CGI-style backends read `X_Forwarded_Host` as
    /// `X-Forwarded-Host`). Only the proxy itself, or a trusted proxy before it, may set them.
    static func isForwardingField(_ name: String) -> Bool {
        // Over the bytes in place: through `String.UTF8View`, the prefix and the search for an underscore cost a
        // forwarded request about 700 instructions more.
        name.withContiguousUTF8 { isForwardingField(bytes: UnsafeRawBufferPointer($0)) }
    }

    private static func isForwardingField(bytes name: UnsafeRawBufferPointer) -> Bool {
        if HTTPSyntax.equalsIgnoringCase(bytes: name, "forwarded")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "x-real-ip")
            || (name.count > 12
                && HTTPSyntax.sameLengthEqualsIgnoringCase(
                    UnsafeRawBufferPointer(rebasing: name[0..<12]),
                    "x-forwarded-"
                ))
        {
            return true
        }
        // Rare: only a name with an underscore pays for a second look.
        guard name.contains(UInt8(ascii: "_")) else { return false }
        let dashed = name.map { $0 == UInt8(ascii: "_") ? UInt8(ascii: "-") : $0 }
        return dashed.withUnsafeBytes { isForwardingField(bytes: $0) }
    }

    /// This hop's `Forwarded` element (RFC 7239): `for=` the client's address (quoted and bracketed for IPv6;
    /// `unknown` without one), `proto=http` (`https` when `secure`), and `host=` when the Host is sent.
    static func forwardedElement(for clientAddress: String?, host: String?, secure: Bool = false) -> String {
        var fields = HTTPFieldLines()
        appendForwarded(to: &fields, for: clientAddress, host: host, secure: secure)
        return fields.first("forwarded") ?? ""
    }

    /// Adds `Forwarded` with ``forwardedElement(for:host:secure:)``, written byte by byte into the fields' own
    /// room: as a string of its own it was an allocation a forwarded request, and a copy into the fields after.
    static func appendForwarded(
        to fields: inout HTTPFieldLines,
        for clientAddress: String?,
        host: String?,
        secure: Bool
    ) {
        let address = clientAddress ?? "unknown"
        address.withContiguousUTF8 { address in
            let isIPv6 = clientAddress != nil && address.contains(UInt8(ascii: ":"))
            let proto: StaticString = secure ? ";proto=https" : ";proto=http"
            guard let host else {
                return appendForwarded(to: &fields, address: address, isIPv6: isIPv6, proto: proto, host: nil)
            }
            host.withContiguousUTF8 { host in
                appendForwarded(to: &fields, address: address, isIPv6: isIPv6, proto: proto, host: host)
            }
        }
    }

    /// `for=` the address (quoted and bracketed when `isIPv6`), `proto`, and `;host=` with `host`, quoted unless it
    /// is a token, when there is one.
    private static func appendForwarded(
        to fields: inout HTTPFieldLines,
        address: UnsafeBufferPointer<UInt8>,
        isIPv6: Bool,
        proto: StaticString,
        host: UnsafeBufferPointer<UInt8>?
    ) {
        let hostIsToken = host.map { HTTPSyntax.isToken(bytes: UnsafeRawBufferPointer($0)) } ?? true
        let escapes = hostIsToken ? 0 : host?.reduce(0) { $0 + (Self.needsEscape($1) ? 1 : 0) } ?? 0
        let capacity =
            4 + address.count + (isIPv6 ? 4 : 0) + proto.utf8CodeUnitCount
            + (host.map { 6 + $0.count + escapes + (hostIsToken ? 0 : 2) } ?? 0)
        let name: StaticString = "Forwarded"
        fields.append(name: name.rawBytes, valueCapacity: capacity) { out in
            var index = 0
            func put(_ bytes: UnsafeRawBufferPointer) {
                UnsafeMutableRawBufferPointer(rebasing: out[index..<(index + bytes.count)]).copyMemory(from: bytes)
                index += bytes.count
            }
            func put(_ byte: UInt8) {
                out[index] = byte
                index += 1
            }
            put(StaticString("for=").rawBytes)
            if isIPv6 { put(StaticString("\"[").rawBytes) }
            put(UnsafeRawBufferPointer(address))
            if isIPv6 { put(StaticString("]\"").rawBytes) }
            put(proto.rawBytes)
            if let host {
                put(StaticString(";host=").rawBytes)
                if hostIsToken {
                    put(UnsafeRawBufferPointer(host))
                } else {
                    // Quoted (a host with a port is no token), and copied whole when nothing in it is escaped, as
                    // nearly always: byte by byte, a host and port cost a forwarded request about 100 instructions.
                    put(UInt8(ascii: "\""))
                    if escapes == 0 {
                        put(UnsafeRawBufferPointer(host))
                    } else {
                        for byte in host {
                            if needsEscape(byte) { put(UInt8(ascii: "\\")) }
                            put(byte)
                        }
                    }
                    put(UInt8(ascii: "\""))
                }
            }
            return index
        }
    }

    /// Whether `byte` is escaped in a quoted-string.
    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// The headers of a backend response as the proxy passes them on: without hop-by-hop headers and those
    /// its `Connection` header names. Framing (`Content-Length`, `Transfer-Encoding`) is set by the proxy.
    ///
    /// - Parameters:
    ///   - dropping: a name also left out, in the same pass (the tag field clients do not see): removing it
    ///     afterwards scanned and rebuilt the list.
    ///   - replaced: another, which the proxy sets itself (`X-Request-Id`).
    public static func endToEndResponseHeaders(
        _ headers: HTTPHeaders,
        dropping: String? = nil,
        replaced: String? = nil
    ) -> HTTPHeaders {
        let filter = EndToEndFilter(headers)
        // Gathered as a list and handed over whole: `HTTPHeaders.add` would retain each name and value again.
        var result: [(String, String)] = []
        result.reserveCapacity(headers.count + 2)
        for (name, value) in headers where filter.passes(name) {
            if let dropping, HTTPSyntax.sameIgnoringCase(name, dropping) { continue }
            if let replaced, HTTPSyntax.sameIgnoringCase(name, replaced) { continue }
            result.append((name, value))
        }
        return HTTPHeaders(result)
    }

    /// Which of a message's headers travel end to end: those that are not hop-by-hop and that its `Connection`
    /// header does not name.
    public struct EndToEndFilter: Sendable {
        private let named: [String]

        /// The filter of a message without a `Connection` field: only the hop-by-hop fields are dropped.
        public init() {
            named = []
        }

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
