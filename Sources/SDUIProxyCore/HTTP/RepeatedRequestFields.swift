import NIOHTTP1

/// The field lines of the last request head a connection's parser read, and what they were read as.
///
/// A client on a keep-alive connection sends nearly the same head with every request: its request line changes,
/// its fields (host, user agent, platform, accepted codings, credentials) mostly do not. Bytes that are the same
/// read the same, so a head whose field lines equal the last head's, byte for byte, takes its fields from that
/// head rather than checking each line and making a string of each name and value again: one comparison of a
/// few hundred bytes in place of reading them (1,240 instructions less a request with three fields). A head whose
/// fields differ costs that comparison, which stops at the first byte that differs, and a copy of its lines.
///
/// It holds at most ``maximumBytes`` of lines and the fields read from them while the connection is open (their
/// values too, credentials and cookies among them, until the next head or the connection's end): a head with more
/// is read as before and not kept.
///
/// A class, held by its parser, so that a copy of the parser (its connection's handler copies it out and back
/// around every part it reads) retains one reference rather than each of the lines' and fields' buffers. Copies
/// of one parser share it: it only records what bytes read as, so whichever copy reads next gets the answer it
/// would get alone. Not `Sendable`: it belongs to one connection.
final class RepeatedRequestFields {
    /// The most bytes of field lines kept to be compared with the next head's.
    static let maximumBytes = 2_048

    private var lines: [UInt8] = []
    private var read: (section: HTTPMessageSyntax.FieldSection, headers: HTTPHeaders)?

    init() {}

    /// What `lines` were read as, when they are the field lines last kept, byte for byte; nil otherwise.
    func fields(
        repeating lines: UnsafeRawBufferPointer
    ) -> (section: HTTPMessageSyntax.FieldSection, headers: HTTPHeaders)? {
        guard let read, self.lines.count == lines.count else { return nil }
        return self.lines.withUnsafeBytes { ByteSearch.same($0, lines) } ? read : nil
    }

    /// Keeps `lines` and what they were read as, for the next head (replacing what was kept).
    func keep(
        _ lines: UnsafeRawBufferPointer,
        section: HTTPMessageSyntax.FieldSection,
        headers: HTTPHeaders
    ) {
        guard lines.count <= Self.maximumBytes else {
            self.lines = []
            read = nil
            return
        }
        // In place: the array is this memo's alone, so its room is kept from one head to the next.
        self.lines.removeAll(keepingCapacity: true)
        self.lines.append(contentsOf: lines)
        read = (section, headers)
    }
}
