import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Where a responder writes the response to one request, whatever carries it: an HTTP/1.1 connection today
/// (``PublicHTTPHandler``), an HTTP/2 stream or a compressing stage tomorrow.
///
/// A responder knows nothing of framing, keep-alive or flushing: it writes a whole response (a stored entry, or
/// one it composed) or streams one (head, body parts, end), and the sink reports to its connection that the
/// response ended. It is called on ``eventLoop`` only.
protocol ResponseSink: AnyObject {
    /// The loop the response is written on; responders complete their work on it.
    var eventLoop: any EventLoop { get }
    /// Who sent the request, for the forwarding headers of a request sent upstream.
    var client: ClientPeer { get }
    /// What the request's access-log line will say, noted as it goes; nil without an access log.
    var accessNotes: AccessNotes? { get }

    /// Writes an interim (1xx) response ahead of the final one; a sink that has begun the final one, or whose
    /// client cannot take interim responses, lets it go.
    func writeInterim(status: HTTPResponseStatus, headers: HTTPHeaders)
    /// Writes a stored entry, presented as `presentation` says; the response ends with it.
    func writeStored(_ entry: CachedResponse, _ presentation: EntryPresentation)
    /// Writes a response the proxy composed whole; the response ends with it. `headers` are end-to-end headers.
    func writeComposed(status: HTTPResponseStatus, headers: HTTPHeaders, body: ByteBuffer, cacheResult: CacheResult?)

    /// Begins a streamed response. `headers` are end-to-end headers (no `Connection`, no framing).
    func writeHead(status: HTTPResponseStatus, headers: HTTPHeaders, cacheResult: CacheResult?)
    /// Begins a streamed response with a backend's head, relayed with this hop's fields.
    func writeHead(_ head: RelayedResponseHead, cacheResult: CacheResult?)
    /// Writes a part of a streamed body; the future completes when the client can take more.
    func writeBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void>
    /// Ends a streamed response.
    func writeEnd()
    /// Cuts the response short when it can no longer be completed honestly (its head is out, its body is not).
    func abort()
}

/// Who sent a request and how, as the forwarding headers need it.
struct ClientPeer {
    /// The peer's IP address as text.
    var address: String?
    /// Listed in `listen.trustedProxies`: its forwarding headers are kept, and this hop appended to them.
    var isTrustedProxy: Bool
    /// The connection is TLS: the backend is told `https`.
    var isSecure = false
    /// The fields the connection's last request went to the backend with, to be sent again when the next one's
    /// are built from the same: an HTTP/1.1 connection's, or an HTTP/2 connection's, which its streams share (all
    /// on its event loop). Nil: each request's are built.
    var lastUpstreamFields: RepeatedUpstreamFields?

    init(address: String?, isTrustedProxy: Bool, isSecure: Bool = false) {
        self.address = address
        self.isTrustedProxy = isTrustedProxy
        self.isSecure = isSecure
    }

    /// The peer of a connection from `remote`, judged against `listen.trustedProxies`.
    init(remote: SocketAddress?, trustedProxies: [IPAddressRange], isSecure: Bool) {
        let isTrustedProxy =
            !trustedProxies.isEmpty
            && remote.flatMap(IPAddressRange.bytes(of:)).map { bytes in trustedProxies.contains { $0.contains(bytes) } }
                == true
        self.init(address: remote?.ipAddress, isTrustedProxy: isTrustedProxy, isSecure: isSecure)
    }

    /// How a request of `version` from this peer reached the proxy, for `Via` and the forwarding fields.
    func received(_ version: HTTPVersion) -> UpstreamRequestBuilder.Received {
        .init(version: version, isSecure: isSecure)
    }
}

/// How a stored entry answers a request.
struct EntryPresentation {
    /// `Cache-Status` and `X-Cache`, written after `Age`.
    var annotation: CacheAnnotation
    var cacheResult: CacheResult { annotation.result }
    /// The entry's age, sent on every response served from the cache.
    var age: Int64
    /// Answer 304 with no body: the client already has this representation.
    var notModified = false
    /// Beagle 1.x: `beagle-hash` and a plain `Cache-Control: max-age=N` with the freshness left.
    var beagleMaxAge: Int64?
    /// The part of the form a `Range` asks for (a 206), or that nothing it asks for exists (a 416); nil for the
    /// whole form.
    var range: RangeRequest.Decision?
    /// The form the request negotiated (``ContentNegotiation``): nil for identity.
    var coding: ContentCoding?
    /// The request's id, returned in `X-Request-Id`: the client's own, or the one the proxy sent the backend for it.
    var requestID: String?

    /// Whether every stored line goes out as stored, none left out or changed: the stored head is then copied
    /// whole, and what the presentation adds (the request's id only) is written after it.
    var keepsEveryStoredLine: Bool { !notModified && beagleMaxAge == nil && range == nil }

    /// The status `entry` is sent with.
    func status(of entry: CachedResponse) -> HTTPResponseStatus {
        if notModified { return .notModified }
        switch range {
        case .part?: return .partialContent
        case .unsatisfiable?: return .rangeNotSatisfiable
        case .whole?, nil: return entry.status
        }
    }

    /// Whether a body follows the head (unless the request was a HEAD).
    var sendsBody: Bool { !notModified && range != .unsatisfiable }

    /// The bytes of `form`'s body that are sent.
    func bodyRange(of form: borrowing StoredForm) -> Range<Int> {
        if case .part(let part)? = range { return part.lowerBound..<(part.upperBound + 1) }
        return 0..<form.bodyLength
    }
}

// The fields of an entry presented otherwise than as stored, whatever wire writes them: which stored fields stay
// (cut from the stored head, never parsed) and which the presentation adds.
extension EntryPresentation {
    /// Whether any stored field is kept: a 416 keeps none, only the length of the whole.
    var keepsStoredFields: Bool { range != .unsatisfiable }

    /// Whether the stored field `name` stays: a 304 keeps only the fields a 304 repeats, Beagle 1.x's form has its
    /// own `Cache-Control` and `beagle-hash`, and a part's length is its own.
    func keepsStoredField(_ name: UnsafeRawBufferPointer) -> Bool {
        if range != nil, HTTPSyntax.equalsIgnoringCase(bytes: name, "content-length") { return false }
        if notModified,
            !ConditionalRequest.notModifiedHeaderNames.contains(where: {
                HTTPSyntax.equalsIgnoringCase(bytes: name, $0)
            })
        {
            return false
        }
        return beagleMaxAge == nil
            || !(HTTPSyntax.equalsIgnoringCase(bytes: name, "cache-control")
                || HTTPSyntax.equalsIgnoringCase(bytes: name, "beagle-hash"))
    }

    /// Whether the answer says `Accept-Ranges: bytes`, ahead of the stored fields: every answer from a 200 but a
    /// 304, which repeats only the fields a 200 carries about the representation (RFC 9110 section 15.4.5).
    func advertisesRanges(_ entry: CachedResponse) -> Bool {
        entry.advertisesRanges && !notModified && range != .unsatisfiable
    }

    /// Calls `body` with each field the presentation adds after the stored ones it keeps, in order: the request's
    /// id, Beagle 1.x's fields, a part's range and length, a 416's range.
    func forEachOwnField(
        of entry: CachedResponse,
        _ form: borrowing StoredForm,
        _ body: (_ name: String, _ value: String) -> Void
    ) {
        if let requestID { body("X-Request-Id", requestID) }
        if range == .unsatisfiable {
            body("Content-Range", "bytes */\(form.bodyLength)")
            body("Content-Length", "0")
            return
        }
        if let beagleMaxAge {
            body("Cache-Control", "max-age=\(beagleMaxAge)")
            body("beagle-hash", entry.contentHash)
        }
        if case .part(let part)? = range {
            body("Content-Range", "bytes \(part.lowerBound)-\(part.upperBound)/\(form.bodyLength)")
            body("Content-Length", String(part.count))
        }
    }
}

extension RequestTally {
    /// Counts a stored entry sent in `form`, as `presentation` presents it, and the body bytes the form saved when
    /// it went out whole in a coding: what every wire records of a stored response.
    func countStoredForm(
        of entry: CachedResponse,
        _ form: borrowing StoredForm,
        _ presentation: EntryPresentation,
        sendsBody: Bool
    ) {
        let whole = sendsBody && presentation.range == nil
        countStoredForm(
            presentation.coding,
            savedBytes: whole && presentation.coding != nil ? entry.bodyLength - form.bodyLength : 0
        )
    }
}

extension ResponseSink {
    /// Writes a response that was not stored, its fields changed as `clientFields` says: a backend's (`forwarded`,
    /// which then carries this hop in `Via`), or one the proxy made.
    func write(
        _ response: UpstreamResponse,
        forwarded: Bool,
        annotation: CacheAnnotation?,
        clientFields: ClientFacingFields = ClientFacingFields()
    ) {
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(response.headers)
        clientFields.apply(to: &headers)
        if forwarded { headers.add(name: "Via", value: CachedResponse.ownVia) }
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.readableBytes))
        annotation?.add(to: &headers)
        writeComposed(status: response.status, headers: headers, body: response.body, cacheResult: annotation?.result)
    }

    /// Writes `error` as the JSON body of the error model.
    func write(_ error: ProxyError, annotation: CacheAnnotation? = nil) {
        let body = ByteBuffer(string: error.jsonBody())
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        headers.add(name: "Cache-Control", value: "no-store")
        annotation?.add(to: &headers)
        writeComposed(status: error.status, headers: headers, body: body, cacheResult: annotation?.result)
    }
}
