import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// A backend's response head as its client is sent it, still in the backend's bytes: the fields that travel end to
/// end, as they came (``HTTPFieldLines``), then this hop's own, `Via`, `X-Request-Id` and the cache's annotation.
///
/// A pass-through's head went from the backend's bytes to strings, to a collection, to a filtered collection with
/// this hop's fields added, and to bytes again. An HTTP/1.1 connection now copies the kept lines from where the
/// parser found them (``writeLines(into:)``); a wire that takes a collection (HTTP/2) asks for ``headers``.
struct RelayedResponseHead {
    let status: HTTPResponseStatus
    private let fields: HTTPFieldLines
    /// The body's length when the backend's framing declares one; the connection makes room for a small body
    /// behind the head with it.
    let bodyLength: Int?
    private let filter: UpstreamRequestBuilder.EndToEndFilter
    /// A field clients are not shown (the tag field), lower-cased.
    private let hidden: String?
    /// Its length: most names differ in it, which is then all a name costs to turn away.
    private let hiddenCount: Int
    /// Its first eight bytes (``ClientFacingFields/hiddenFieldLead``), which turn away most names of its length.
    private let hiddenLead: UInt64?
    /// The id returned in `X-Request-Id`, in place of the backend's; nil to pass the backend's as it came.
    private let requestID: String?
    /// `Cache-Status` and `X-Cache`, last.
    let annotation: CacheAnnotation?

    init(
        status: HTTPResponseStatus,
        fields: HTTPFieldLines,
        bodyLength: Int? = nil,
        clientFields: ClientFacingFields,
        requestID: String?,
        annotation: CacheAnnotation?
    ) {
        self.status = status
        self.fields = fields
        self.bodyLength = bodyLength
        self.filter = UpstreamRequestBuilder.EndToEndFilter(fields)
        // The hidden field, its length and its first word read from one place, so that they always agree: the word
        // is tested against the first eight bytes of every name as long as the field. Kept apart rather than asking
        // `clientFields.hides` for each name: holding a copy of the fields retained their strings and arrays, and
        // each call crossed into the other module (a pass-through 460 instructions dearer).
        self.hidden = clientFields.hiddenField
        self.hiddenCount = clientFields.hiddenField?.utf8.count ?? -1
        self.hiddenLead = clientFields.hiddenFieldLead
        self.requestID = requestID
        self.annotation = annotation
    }

    /// Whether the backend's field `name` reaches the client: not hop-by-hop, not named by its `Connection`, not
    /// hidden, and not an `X-Request-Id` the proxy replaces.
    private func keeps(_ name: UnsafeRawBufferPointer) -> Bool {
        guard filter.passes(name) else { return false }
        if name.count == hiddenCount, let hidden,
            hiddenLead.map({ HTTPSyntax.lowercasedASCII(word: name.loadUnaligned(as: UInt64.self)) == $0 }) ?? true,
            HTTPSyntax.sameIgnoringCase(bytes: name, hidden)
        {
            return false
        }
        return requestID == nil || !HTTPSyntax.equalsIgnoringCase(bytes: name, "x-request-id")
    }

    /// Calls `body` with each field the client is sent, in order: the backend's it keeps, then this hop's.
    private func forEachField(
        backend: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void,
        own: (_ name: String, _ value: String) -> Void
    ) {
        fields.forEachField { name, value in
            if keeps(name) { backend(name, value) }
        }
        own("Via", CachedResponse.ownVia)
        if let requestID { own("X-Request-Id", requestID) }
    }

    /// Appends the head's field lines (not its status line, framing or blank line) and returns whether they say
    /// `Content-Length`, which decides the framing of the body behind them.
    ///
    /// The kept lines and this hop's go out in one write, with room for every line the backend sent: a write per
    /// line cost a capacity and uniqueness check each, and measuring the kept ones first a second walk. No
    /// closure here changes a variable it captured: each such change was a run-time exclusivity check, two a line.
    func writeLines(into buffer: inout ByteBuffer) -> Bool {
        let length =
            fields.byteCount + 4 * fields.count + CachedResponse.ownViaLine.utf8CodeUnitCount
            + (requestID.map { 16 + $0.utf8.count } ?? 0)
        let requestID = self.requestID
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { out in
            // A closure, not the method: a method reference boxed `self` in a context allocated for every head.
            let kept = fields.copyLines(to: out, at: 0, where: { keeps($0) })
            let via = HTTPWireFormat.copy(CachedResponse.ownViaLine, to: out, at: kept)
            guard let requestID else { return via }
            return requestID.withContiguousUTF8 { id in
                HTTPWireFormat.copyLine(
                    Self.requestIDName.rawBytes,
                    UnsafeRawBufferPointer(id),
                    to: out,
                    at: via
                )
            }
        }
        annotation?.writeLines(into: &buffer)
        return fields.contains("content-length") && keeps(("content-length" as StaticString).rawBytes)
    }

    private static let requestIDName: StaticString = "X-Request-Id"

    /// The head's fields as a collection, in the order ``writeLines(into:)`` writes them.
    var headers: HTTPHeaders {
        var list: [(String, String)] = []
        list.reserveCapacity(fields.count + 4)
        forEachField(
            backend: { name, value in
                list.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
            },
            own: { name, value in list.append((name, value)) }
        )
        var headers = HTTPHeaders(list)
        annotation?.add(to: &headers)
        return headers
    }
}
