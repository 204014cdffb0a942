import NIOHTTP1

/// What routing read of one client connection's last request head's fields, for a next head with the same fields.
///
/// Admission and the platform walk read every field of every request (``RequestAdmission/FieldFacts``, the
/// platform header, the fields the cache path asks about): a function of the fields and the router alone. A
/// keep-alive client sends the same fields with every request, and the request parser hands a head whose field
/// lines repeat the last head's the very collection it read then (``RepeatedRequestFields``); such a head's
/// fields are recognised by their bits (`HTTPHeaders.hasSameRepresentation(as:)`) and what routing read
/// of them is taken again. Any other head's fields are read in full; nothing is compared field by field.
///
/// It keeps the last head's fields while the connection is open, only when they are at most
/// ``RepeatedRequestFields/maximumBytes`` (no larger head is handed out again), and what was read of them.
///
/// Not `Sendable`: one HTTP/1.1 connection's, on the event loop it serves.
public final class RepeatedRouteFields {
    /// What a router read of one collection of fields: a class, so that handing it out retains one reference, not
    /// each of its strings and lists.
    final class Reading {
        let headers: HTTPHeaders
        let router: RequestRouter.Identity
        let admission: RequestAdmission.FieldFacts
        let platform: RequestRouter.PlatformReading

        init(
            of headers: HTTPHeaders,
            by router: RequestRouter.Identity,
            admission: RequestAdmission.FieldFacts,
            platform: RequestRouter.PlatformReading
        ) {
            self.headers = headers
            self.router = router
            self.admission = admission
            self.platform = platform
        }
    }

    private var last: Reading?

    public init() {}

    /// What `router` read of `headers` last, when they are the fields it kept.
    func reading(of headers: HTTPHeaders, by router: RequestRouter.Identity) -> Reading? {
        guard let last, last.router === router, last.headers.hasSameRepresentation(as: headers) else { return nil }
        return last
    }

    /// Keeps `reading` for the connection's next head; forgets what it kept instead when the fields are larger than
    /// a repeated head's can be.
    func keep(_ reading: Reading) {
        // Admission counts four bytes a line for `: ` and CRLF. The parser's kept lines can be fewer: a line written
        // `name:value` has one less, and the last line's CRLF is not among them.
        let fitsRepeatedHead =
            reading.admission.bytes <= RepeatedRequestFields.maximumBytes + reading.headers.count + 2
        last = fitsRepeatedHead ? reading : nil
    }
}
