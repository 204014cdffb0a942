import NIOHTTP1

/// The fields one client connection's last request was sent to the backend with, and what they were built from.
///
/// A keep-alive connection's requests are nearly always built from the same things: its client's fields (taken,
/// when they repeat, from the last head as it was read: ``RepeatedRequestFields``), its address, its platform.
/// ``UpstreamRequestBuilder/fields(from:noted:platform:clientAddress:purpose:clientIsTrustedProxy:hostIsKeyed:received:reusing:)``
/// is a function of those alone, so when they are the last request's it hands out the fields it built then: a
/// comparison of its inputs in place of checking every client field against the lists of those not forwarded and
/// writing a dozen lines (1,890 instructions less a miss of the benchmarks, 2,680 a pass-through).
///
/// Strings are compared as their bytes: `String`'s `==` holds two spellings of one character (`e` and a combining
/// accent, or `é`) equal, and the backend must get each request's own bytes.
///
/// It keeps the last request's client fields and what was built of them, and only when those fields are at most
/// ``maximumClientFieldBytes``: a connection holds no more than that beside the built lines while it is open.
///
/// Not `Sendable`: one connection's, on the event loop it serves; a connection whose requests differ each time costs
/// the comparison, which stops at the first input that differs.
public final class RepeatedUpstreamFields {
    /// What the fields were built from.
    struct Inputs {
        /// The builder's own, made with it: a configuration reloaded makes a builder with another.
        var builder: UpstreamRequestBuilder.Identity
        var clientHeaders: HTTPHeaders
        var noted: RequestFieldPresence?
        var platform: String
        var clientAddress: String?
        var purpose: UpstreamRequestBuilder.Purpose
        var clientIsTrustedProxy: Bool
        var hostIsKeyed: Bool
        var received: UpstreamRequestBuilder.Received
    }

    /// The most bytes of client fields (names and values) kept to be compared with the next request's.
    static let maximumClientFieldBytes = 2_048

    private var inputs: Inputs?
    private var fields = HTTPFieldLines()

    public init() {}

    /// The fields built last, when they were built from these inputs (``Inputs``): compared one by one, as they
    /// are passed, without making them into one value (a copy of each, retained and released), the cheap ones
    /// first; the client's fields in order, each name and value byte for byte.
    func fields(
        builtBy builder: UpstreamRequestBuilder.Identity,
        from clientHeaders: HTTPHeaders,
        noted: RequestFieldPresence?,
        platform: String,
        clientAddress: String?,
        purpose: UpstreamRequestBuilder.Purpose,
        clientIsTrustedProxy: Bool,
        hostIsKeyed: Bool,
        received: UpstreamRequestBuilder.Received
    ) -> HTTPFieldLines? {
        guard let last = inputs, last.builder === builder, last.noted == noted, last.purpose == purpose,
            last.clientIsTrustedProxy == clientIsTrustedProxy, last.hostIsKeyed == hostIsKeyed,
            last.received == received, last.clientHeaders.count == clientHeaders.count,
            Self.sameBytes(last.platform, platform), Self.sameBytes(last.clientAddress, clientAddress)
        else { return nil }
        // A repeated head's fields are the last head's collection itself: settled without reading a field.
        if last.clientHeaders.hasSameRepresentation(as: clientHeaders) { return fields }
        // By index, not `zip` over the two: their iterators cost a miss 200 instructions more.
        var index = clientHeaders.startIndex
        var lastIndex = last.clientHeaders.startIndex
        while index != clientHeaders.endIndex {
            let field = clientHeaders[index]
            let lastField = last.clientHeaders[lastIndex]
            guard Self.sameBytes(field.name, lastField.name), Self.sameBytes(field.value, lastField.value) else {
                return nil
            }
            clientHeaders.formIndex(after: &index)
            last.clientHeaders.formIndex(after: &lastIndex)
        }
        return fields
    }

    /// Keeps `fields`, built from `inputs`, for the connection's next request, checked for the wire once
    /// (``HTTPFieldLines/checkForWire()``) so that the requests they are sent with again do not check them; forgets
    /// the last ones instead when the client's fields are longer than ``maximumClientFieldBytes``. Returns the
    /// fields, checked when kept.
    func keep(_ fields: HTTPFieldLines, builtFrom inputs: Inputs) -> HTTPFieldLines {
        var clientFieldBytes = 0
        for (name, value) in inputs.clientHeaders { clientFieldBytes += name.utf8.count + value.utf8.count }
        guard clientFieldBytes <= Self.maximumClientFieldBytes else {
            self.inputs = nil
            self.fields = HTTPFieldLines()
            return fields
        }
        var fields = fields
        fields.checkForWire()
        self.inputs = inputs
        self.fields = fields
        return fields
    }

    /// Whether `a` and `b` are the same bytes (not merely equivalent characters).
    ///
    /// Strings whose two words are the same are the same bytes: a small string holds its bytes in them, another
    /// points at storage no one changes. The strings of a repeated head (``RepeatedRequestFields``) and of one
    /// connection are these, settled by that test; reaching for each one's bytes cost about 900 instructions a
    /// request more.
    private static func sameBytes(_ a: String, _ b: String) -> Bool {
        if MemoryLayout<String>.size == MemoryLayout<(UInt64, UInt64)>.size,
            unsafeBitCast(a, to: (UInt64, UInt64).self) == unsafeBitCast(b, to: (UInt64, UInt64).self)
        {
            return true
        }
        return a.withContiguousUTF8 { a in
            b.withContiguousUTF8 { b in ByteSearch.same(UnsafeRawBufferPointer(a), UnsafeRawBufferPointer(b)) }
        }
    }

    private static func sameBytes(_ a: String?, _ b: String?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        return sameBytes(a, b)
    }
}
