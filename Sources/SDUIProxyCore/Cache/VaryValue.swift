import NIOHTTP1

/// A request field's value as a variant is chosen by (RFC 9111 section 4.1): the field's lines as one list,
/// each member without the whitespace around it, empty members dropped, and, for fields whose values are
/// case-insensitive, in lower case. Two requests that ask for the same thing in different spelling
/// (`en-US,fr` and `en-us, fr`) select the same variant. `Accept-Language` is read as the preference it states:
/// languages of equal weight in any order, and a weight however written (`q=1`, `q=1.000`, none), are one variant
/// (`en, fr` and `fr, en`); other fields' members are never reordered nor their q-values read.
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
        if name == "accept-language" { return languagePreference(value.lowercased()) }
        return caseInsensitiveFields.contains(name) ? value.lowercased() : value
    }

    /// An `Accept-Language` list (members trimmed, lower case) as its preference: the ranges by weight, heaviest
    /// first, those of equal weight in order of their text, each weight in its shortest form (none for 1).
    /// A member that is not `range` or `range;q=weight` leaves the list as it came: its meaning is the backend's.
    static func languagePreference(_ list: String) -> String {
        var ranges: [(range: String, weight: Int)] = []
        for member in list.split(separator: ",") {
            let parts = member.split(separator: ";", omittingEmptySubsequences: false)
            let range = String(parts[0].trimmingWhitespace())
            guard !range.isEmpty, parts.count <= 2 else { return list }
            var weight = 1000
            if parts.count == 2 {
                let parameter = parts[1].trimmingWhitespace()
                guard parameter.hasPrefix("q="), let parsed = Self.weight(parameter.dropFirst(2)) else { return list }
                weight = parsed
            }
            ranges.append((range, weight))
        }
        ranges.sort { $0.weight != $1.weight ? $0.weight > $1.weight : $0.range < $1.range }
        return ranges.map { entry in
            guard entry.weight != 1000 else { return entry.range }
            var fraction = String(entry.weight)
            while fraction.count < 3 { fraction = "0" + fraction }
            while fraction.hasSuffix("0") { fraction.removeLast() }
            return entry.range + ";q=" + (fraction.isEmpty ? "0" : "0." + fraction)
        }.joined(separator: ",")
    }

    /// A weight (RFC 9110 section 12.4.2: `0` to `1` with up to three decimals) in thousandths; nil otherwise.
    static func weight(_ text: Substring) -> Int? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, whole == "0" || whole == "1" else { return nil }
        var decimals = parts.count == 2 ? parts[1] : ""
        guard decimals.count <= 3, decimals.allSatisfy({ $0 >= "0" && $0 <= "9" }) else { return nil }
        while decimals.count < 3 { decimals += "0" }
        let value = Int(whole)! * 1000 + Int(decimals)!
        return value <= 1000 ? value : nil
    }

    /// Request fields whose values compare without regard to case: content codings (RFC 9110 section 8.4.1),
    /// language tags (RFC 5646 section 2.1.1) and charset names (RFC 9110 section 8.3.2).
    static let caseInsensitiveFields: Set<String> = ["accept-encoding", "accept-language", "accept-charset"]
}
