import NIOHTTP1
import SDUIProxyCore

/// Request ids: the client's own when it sent a sane one, else 16 random bytes in hex.
enum RequestID {
    /// The client's `X-Request-Id` when there is exactly one and it is 1 to 128 visible token characters; a value
    /// that could forge log fields or headers is not taken.
    static func given(in headers: HTTPHeaders) -> String? {
        let values = headers["x-request-id"]
        guard values.count == 1, let value = values.first, value.utf8.count <= 128, HTTPSyntax.isToken(value) else {
            return nil
        }
        return value
    }

    /// Who a request sent to the backend for `head` is for: the client's sane id, the access line's, or a new
    /// one, and the request's span when it is traced. `fields` is what the router noted of the head (nil: not
    /// noted): a head noted without an `X-Request-Id` is not searched for one.
    static func upstreamIdentity(
        of head: HTTPRequestHead,
        notes: AccessNotes?,
        fields: RequestFieldPresence? = nil
    ) -> UpstreamIdentity {
        let sentID = fields?.contains(.requestID) ?? true
        // The notes' id, when they have one, is the client's sane one already, or the one made for its line.
        return UpstreamIdentity(
            requestID: notes?.requestID ?? (sentID ? given(in: head.headers) : nil) ?? make(),
            span: notes?.traced
        )
    }

    /// A new id: 128 random bits from the system's secure generator, as 32 lower-case hex digits (as queue ids).
    static func make() -> String { SecureRandomID.make() }
}
