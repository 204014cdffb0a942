/// Which stored form of a response a request gets, by its `Accept-Encoding` (RFC 9110 section 12.5.3), and the
/// entity tag each form carries.
///
/// Read on every hit of an entry kept in more than one form, so it reads the field's bytes where they lie and
/// allocates nothing.
public enum ContentNegotiation {
    /// The forms an entry is kept in beside the identity one.
    public struct Codings: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        public static let br = Codings(rawValue: 1 << 0)
        public static let gzip = Codings(rawValue: 1 << 1)

        public init(_ coding: ContentCoding) {
            switch coding {
            case .br: self = .br
            case .gzip: self = .gzip
            case .deflate: self = []
            }
        }

        /// The stored ones among `codings`.
        public init(_ codings: some Sequence<ContentCoding>) {
            self = codings.reduce(into: []) { $0.formUnion(Codings($1)) }
        }
    }

    /// The coding to send for a request whose `Accept-Encoding` is `field` (nil when absent), among the codings
    /// `available` beside identity; nil for identity.
    ///
    /// The highest weight wins; at equal weight brotli goes before gzip, and both before identity. `*` stands for
    /// every coding the field does not name. No field, or an empty one, asks for identity. Identity, when the
    /// field does not name it (nor `*`), is acceptable but least preferred: `gzip;q=0.5` still gets gzip. When
    /// nothing acceptable is available, identity is sent even if the field refuses it, as the RFC advises a
    /// server to do rather than fail.
    public static func coding(forAcceptEncoding field: String?, available: Codings) -> ContentCoding? {
        guard var text = field, !available.isEmpty else { return nil }
        var weights = Weights()
        text.withUTF8 { weights.read($0) }
        let identity = weights.identity ?? weights.any ?? Weights.leastAcceptable
        var best: ContentCoding?
        var bestWeight = identity
        for coding in ContentCoding.stored where available.contains(Codings(coding)) {
            let weight = weights.weight(of: coding)
            // A coding wins ties with identity, and brotli (first) with gzip.
            if weight > 0, weight > bestWeight || (best == nil && weight == bestWeight) {
                best = coding
                bestWeight = weight
            }
        }
        return best
    }

    /// The entity tag of `coding`'s form of a response whose identity form is tagged `etag`: the same opaque
    /// tag with the coding appended inside the quotes (`"abc"` → `"abc-gzip"`, `W/"abc"` → `W/"abc-gzip"`).
    ///
    /// Inside the quotes, because clients' validators are compared weakly (RFC 9110 section 8.8.3.2) and only
    /// the opaque part tells the forms apart: a client holding the gzip form that asks for identity must get the
    /// identity body, not a 304.
    public static func etag(_ etag: String, for coding: ContentCoding) -> String {
        guard etag.utf8.count >= 2, etag.utf8.last == UInt8(ascii: "\"") else { return etag + "-" + coding.rawValue }
        return etag.dropLast() + "-" + coding.rawValue + "\""
    }

    /// The weights a field gives, in thousandths (`q=0.5` is 500); nil where it names nothing.
    private struct Weights {
        var br: Int?
        var gzip: Int?
        var identity: Int?
        var any: Int?

        /// Identity's weight when the field neither names it nor has `*`: above refusal, below every coding the
        /// field asks for.
        static let leastAcceptable = 0

        func weight(of coding: ContentCoding) -> Int {
            switch coding {
            case .br: br ?? any ?? -1
            case .gzip: gzip ?? any ?? -1
            case .deflate: -1
            }
        }

        /// Reads `#( codings [ weight ] )`; a member whose weight does not parse is left out.
        mutating func read(_ bytes: UnsafeBufferPointer<UInt8>) {
            var index = 0
            while index < bytes.count {
                var end = index
                while end < bytes.count, bytes[end] != UInt8(ascii: ",") { end += 1 }
                readMember(UnsafeBufferPointer(rebasing: bytes[index..<end]))
                index = end + 1
            }
        }

        private mutating func readMember(_ member: UnsafeBufferPointer<UInt8>) {
            var tokenEnd = 0
            while tokenEnd < member.count, member[tokenEnd] != UInt8(ascii: ";") { tokenEnd += 1 }
            let token = Self.trimmed(UnsafeBufferPointer(rebasing: member[..<tokenEnd]))
            guard !token.isEmpty else { return }
            var weight = 1000
            if tokenEnd < member.count {
                guard let parsed = Self.weight(UnsafeBufferPointer(rebasing: member[(tokenEnd + 1)...])) else { return }
                weight = parsed
            }
            if Self.equals(token, "br") {
                br = max(br ?? 0, weight)
            } else if Self.equals(token, "gzip") || Self.equals(token, "x-gzip") {
                gzip = max(gzip ?? 0, weight)
            } else if Self.equals(token, "identity") {
                identity = max(identity ?? 0, weight)
            } else if Self.equals(token, "*") {
                any = max(any ?? 0, weight)
            }
        }

        /// The weight in `;q=0.5` (after the semicolon), in thousandths; nil unless it is exactly a `q` parameter
        /// with a value of at most three decimals between 0 and 1.
        private static func weight(_ parameter: UnsafeBufferPointer<UInt8>) -> Int? {
            let text = trimmed(parameter)
            guard text.count >= 3, text[0] | 0x20 == UInt8(ascii: "q"), text[1] == UInt8(ascii: "=") else { return nil }
            let value = UnsafeBufferPointer(rebasing: text[2...])
            guard let first = value.first, first == UInt8(ascii: "0") || first == UInt8(ascii: "1") else { return nil }
            var thousandths = first == UInt8(ascii: "1") ? 1000 : 0
            guard value.count > 1 else { return thousandths }
            guard value[1] == UInt8(ascii: "."), value.count <= 5 else { return nil }
            var scale = 100
            for digit in value[2...] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { return nil }
                thousandths += Int(digit - UInt8(ascii: "0")) * scale
                scale /= 10
            }
            return thousandths <= 1000 ? thousandths : nil
        }

        private static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8> {
            var start = 0
            var end = bytes.count
            while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
            while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
            return UnsafeBufferPointer(rebasing: bytes[start..<end])
        }

        private static func equals(_ bytes: UnsafeBufferPointer<UInt8>, _ lowercase: StaticString) -> Bool {
            guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
            let expected = lowercase.utf8Start
            for index in 0..<bytes.count {
                let byte = bytes[index]
                let folded = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
                guard folded == expected[index] else { return false }
            }
            return true
        }
    }
}
