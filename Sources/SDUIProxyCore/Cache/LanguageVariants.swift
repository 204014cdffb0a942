/// Language variants answered across `Accept-Language` spellings (RFC 9110 section 12.5.4, RFC 4647 section
/// 3.3.1): a response stored in a language (`Content-Language: de`) can answer a request whose strongest
/// preference that language meets, whatever else the request lists (`fr;q=0.5, de;q=1.0` after `en, de`), where
/// variants are chosen by `Accept-Language` (the route's `vary` or the backend's `Vary` names it).
///
/// The cache files such a response also under the key a request stating just each language it is in would have
/// (``ranges(answeredBy:)``), where nothing is stored yet, and a request that finds no variant of its own looks
/// under the keys of the ranges it prefers most (``preferred(acceptLanguage:)``). Languages are matched whole
/// (`de-CH` is not taken for `de`): a prefix would answer a request for `de` with what the backend chose for
/// `de-CH`, and one that refuses `de-CH` (`de-CH;q=0, de`) with what it refused.
public enum LanguageVariants {
    /// The most ranges a request's strongest preference is looked up by.
    public static let maximumPreferred = 4
    /// The most ranges a response is filed under.
    public static let maximumAnswered = 8

    /// The ranges `acceptLanguage` (the field's lines) prefers most: those of the highest weight, lower case, in
    /// the order of their text; at most ``maximumPreferred``. Empty when the field is absent, refuses everything,
    /// prefers any language (`*`) at least as much as any it names, or is not a list of `range` and
    /// `range;q=weight` members.
    public static func preferred(acceptLanguage lines: [String]) -> [String] {
        var best = 0
        var ranges: [String] = []
        var anyWeight = -1
        for line in lines {
            for member in line.split(separator: ",") {
                let parts = member.split(separator: ";", omittingEmptySubsequences: false)
                let range = parts[0].trimmingWhitespace().lowercased()
                guard !range.isEmpty, parts.count <= 2 else { return [] }
                var weight = 1000
                if parts.count == 2 {
                    let parameter = parts[1].trimmingWhitespace().lowercased()
                    guard parameter.hasPrefix("q="), let parsed = VaryValue.weight(parameter.dropFirst(2)[...])
                    else { return [] }
                    weight = parsed
                }
                if range == "*" {
                    anyWeight = max(anyWeight, weight)
                } else if weight > best {
                    (best, ranges) = (weight, [range])
                } else if weight == best, weight > 0, !ranges.contains(range) {
                    ranges.append(range)
                }
            }
        }
        guard best > 0, anyWeight < best else { return [] }
        return Array(ranges.sorted().prefix(maximumPreferred))
    }

    /// The ranges a response in `contentLanguage` meets: each tag it lists, lower case, at most
    /// ``maximumAnswered``.
    public static func ranges(answeredBy contentLanguage: String) -> [String] {
        var ranges: [String] = []
        for member in contentLanguage.split(separator: ",") {
            let tag = member.trimmingWhitespace().lowercased()
            guard !tag.isEmpty, tag != "*", !ranges.contains(tag) else { continue }
            ranges.append(tag)
            if ranges.count == maximumAnswered { break }
        }
        return ranges
    }

    /// Whether a response in `contentLanguage` meets `range` (lower case).
    public static func answers(contentLanguage: String, range: String) -> Bool {
        ranges(answeredBy: contentLanguage).contains(range)
    }
}
