import NIOHTTP1

/// A request field's value as a variant is chosen by (RFC 9111 section 4.1): the field's lines as one list,
/// each member without the whitespace around it, empty members dropped, and, for fields whose values are
/// case-insensitive, in lower case. Two requests that ask for the same thing in different spelling
/// (`en-US,fr` and `en-us, fr`) select the same variant. Members are never reordered and q-values never read:
/// `fr, en` may be answered differently from `en, fr`.
public enum VaryValue {
    /// The normalised value of `name` (lower case) in `headers`; empty when the request does not send it.
    public static func of(_ name: String, in headers: HTTPHeaders) -> String {
        var value = ""
        for line in headers[name] {
            for member in line.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: true) {
                let trimmed = HTTPSyntax.trimmingOptionalWhitespace(member)
                guard !trimmed.isEmpty else { continue }
                if !value.isEmpty { value += "," }
                value += String(Substring(trimmed))
            }
        }
        return caseInsensitiveFields.contains(name) ? value.lowercased() : value
    }

    /// Request fields whose values compare without regard to case: content codings (RFC 9110 section 8.4.1),
    /// language tags (RFC 5646 section 2.1.1) and charset names (RFC 9110 section 8.3.2).
    static let caseInsensitiveFields: Set<String> = ["accept-encoding", "accept-language", "accept-charset"]
}
