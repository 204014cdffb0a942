import NIOHTTP1

/// A client's `Range` on a complete stored 200 (RFC 9110 section 14), decided without I/O: the part to send as
/// a 206, a 416 when no part of the representation is asked for, or the whole 200.
///
/// One `bytes` range is served; several ranges, another unit, a `Range` that does not parse, or an `If-Range`
/// that does not match strongly get the whole representation, which RFC 9110 section 14.2 allows.
public enum RangeRequest {
    public enum Decision: Equatable, Sendable {
        /// Send the whole representation (200).
        case whole
        /// Send these bytes (206).
        case part(ClosedRange<Int>)
        /// Nothing asked for exists (416, `Content-Range: bytes */length`).
        case unsatisfiable
    }

    /// What a request with `headers` gets of a stored 200 of `length` bytes with validators `etag` (the strong
    /// one clients see) and `lastModified`; `date` is the stored `Date`, which makes a `Last-Modified` strong when
    /// at least a second later (RFC 9110 section 8.8.2.2).
    public static func decide(
        headers: HTTPHeaders,
        length: Int,
        etag: String,
        lastModified: String?,
        date: () -> String?
    ) -> Decision {
        let ranges = headers["range"]
        guard ranges.count == 1, let spec = byteRange(ranges[0]) else { return .whole }
        let ifRange = headers["if-range"]
        if !ifRange.isEmpty {
            guard ifRange.count == 1,
                matchesStrongly(ifRange[0], etag: etag, lastModified: lastModified, date: date)
            else { return .whole }
        }
        return satisfy(spec, length: length)
    }

    /// A `bytes` range-spec: `first-last`, `first-` or `-suffix`.
    public enum Spec: Equatable, Sendable {
        case from(Int, through: Int?)
        case suffix(Int)

        /// The `Range` value that asks for this range.
        public var value: String {
            switch self {
            case .from(let first, nil): "bytes=\(first)-"
            case .from(let first, let last?): "bytes=\(first)-\(last)"
            case .suffix(let count): "bytes=-\(count)"
            }
        }
    }

    /// The one range a `Range` value asks for, or nil when it asks for another unit, several ranges, or does not
    /// parse.
    public static func byteRange(_ value: String) -> Spec? {
        let text = value.trimmingWhitespace()
        guard let equals = text.firstIndex(of: "="),
            HTTPSyntax.equalsIgnoringCase(String(text[..<equals]), "bytes")
        else { return nil }
        let set = text[text.index(after: equals)...]
        guard !set.contains(","), let dash = set.firstIndex(of: "-") else { return nil }
        let first = set[..<dash]
        let last = set[set.index(after: dash)...]
        if first.isEmpty {
            guard let suffix = number(last) else { return nil }
            return .suffix(suffix)
        }
        guard let start = number(first) else { return nil }
        if last.isEmpty { return .from(start, through: nil) }
        guard let end = number(last), end >= start else { return nil }
        return .from(start, through: end)
    }

    /// Digits only; a number too large for an `Int` is `Int.max`, past any representation.
    private static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return Int(text) ?? Int.max
    }

    public static func satisfy(_ spec: Spec, length: Int) -> Decision {
        guard length > 0 else { return .unsatisfiable }
        switch spec {
        case .from(let start, let end):
            guard start < length else { return .unsatisfiable }
            return .part(start...min(end ?? (length - 1), length - 1))
        case .suffix(let count):
            guard count > 0 else { return .unsatisfiable }
            return .part(max(0, length - count)...(length - 1))
        }
    }

    /// Whether an `If-Range` names this representation with a strong validator (RFC 9110 section 13.1.5): the
    /// same strong entity tag, or the `Last-Modified` date when that date is strong. A weak tag never matches.
    public static func matchesStrongly(
        _ value: String,
        etag: String,
        lastModified: String?,
        date: () -> String?
    ) -> Bool {
        let condition = value.trimmingWhitespace()
        if condition.hasPrefix("\"") || condition.hasPrefix("W/") {
            return !condition.hasPrefix("W/") && !etag.hasPrefix("W/") && condition == etag
        }
        guard let asked = HTTPDate.parse(condition), let lastModified,
            let modified = HTTPDate.parse(lastModified), asked == modified,
            let dated = date().flatMap({ HTTPDate.parse($0) })
        else { return false }
        return dated - modified >= 1
    }
}
