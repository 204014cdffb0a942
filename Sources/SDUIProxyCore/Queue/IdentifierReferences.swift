/// Where a queued write names local identifiers, and the write with the backend's identifiers in their place.
///
/// A write names an identifier only as a whole: a whole path segment (`/api/orders/tmp-7f3a/items`), a whole query
/// value (`?order=tmp-7f3a`), or a whole string value anywhere in a JSON body (`{"order":"tmp-7f3a"}`, not a key).
/// A substring never matches (`tmp-7f3a1` does not name `tmp-7f3a`). A body that is not JSON is never read nor
/// rewritten; its target still is. Each candidate costs one hash lookup, whatever the number of pending
/// identifiers.
public enum IdentifierReferences {
    /// The identifiers of `pending` that `target` (a path with an optional query) names, in order of appearance,
    /// each once.
    public static func named(in target: String, among pending: Set<LocalIdentifier>) -> [LocalIdentifier] {
        guard !pending.isEmpty else { return [] }
        var named: [LocalIdentifier] = []
        forEachCandidate(in: target) { candidate, _ in
            if let identifier = LocalIdentifier(String(candidate)), pending.contains(identifier),
                !named.contains(identifier)
            {
                named.append(identifier)
            }
        }
        return named
    }

    /// The identifiers of `pending` that the JSON `body` names as string values, in order, each once; none when
    /// the body is not JSON.
    public static func named(inJSON body: [UInt8], among pending: Set<LocalIdentifier>) -> [LocalIdentifier] {
        guard !pending.isEmpty, let values = JSONStringValues.values(in: body) else { return [] }
        var named: [LocalIdentifier] = []
        for value in values {
            if let identifier = LocalIdentifier(value.text), pending.contains(identifier),
                !named.contains(identifier)
            {
                named.append(identifier)
            }
        }
        return named
    }

    /// Every sane token `target` has as a whole path segment or query value, in order, each once: what a store that
    /// other processes write to is asked about.
    public static func candidates(in target: String) -> [LocalIdentifier] {
        var found: [LocalIdentifier] = []
        forEachCandidate(in: target) { candidate, _ in
            if let identifier = LocalIdentifier(String(candidate)), !found.contains(identifier) {
                found.append(identifier)
            }
        }
        return found
    }

    /// Every sane token the JSON `body` has as a string value, in order, each once; none when it is not JSON.
    public static func candidates(inJSON body: [UInt8]) -> [LocalIdentifier] {
        guard let values = JSONStringValues.values(in: body) else { return [] }
        var found: [LocalIdentifier] = []
        var seen: Set<LocalIdentifier> = []
        for value in values {
            if let identifier = LocalIdentifier(value.text), seen.insert(identifier).inserted {
                found.append(identifier)
            }
        }
        return found
    }

    /// `target` with each whole segment or query value that `mapping` names replaced by its backend identifier.
    public static func rewritten(_ target: String, with mapping: [LocalIdentifier: RemoteIdentifier]) -> String {
        guard !mapping.isEmpty else { return target }
        var result = ""
        var copied = target.startIndex
        forEachCandidate(in: target) { candidate, range in
            guard let identifier = LocalIdentifier(String(candidate)), let remote = mapping[identifier] else { return }
            result += target[copied..<range.lowerBound]
            result += remote.text
            copied = range.upperBound
        }
        result += target[copied...]
        return result
    }

    /// The JSON `body` with each string value that `mapping` names replaced by its backend identifier (a number
    /// when the backend gave a number); nil when nothing changed or the body is not JSON. Everything else keeps its
    /// bytes.
    public static func rewritten(json body: [UInt8], with mapping: [LocalIdentifier: RemoteIdentifier]) -> [UInt8]? {
        guard !mapping.isEmpty, let values = JSONStringValues.values(in: body) else { return nil }
        var result: [UInt8] = []
        var copied = 0
        for value in values {
            guard let identifier = LocalIdentifier(value.text), let remote = mapping[identifier] else { continue }
            result += body[copied..<value.token.lowerBound]
            result += remote.jsonToken
            copied = value.token.upperBound
        }
        guard copied > 0 else { return nil }
        result += body[copied...]
        return result
    }

    /// Calls `body` with each path segment and each query value of `target`, and where it is.
    private static func forEachCandidate(
        in target: String,
        _ body: (Substring, Range<String.Index>) -> Void
    ) {
        let query = target.firstIndex(of: "?")
        let path = target[..<(query ?? target.endIndex)]
        var start = path.startIndex
        while start <= path.endIndex {
            let end = path[start...].firstIndex(of: "/") ?? path.endIndex
            if start < end { body(path[start..<end], start..<end) }
            guard end < path.endIndex else { break }
            start = path.index(after: end)
        }
        guard let query else { return }
        var pairStart = target.index(after: query)
        while pairStart < target.endIndex {
            let pairEnd = target[pairStart...].firstIndex(of: "&") ?? target.endIndex
            if let equals = target[pairStart..<pairEnd].firstIndex(of: "=") {
                let valueStart = target.index(after: equals)
                if valueStart < pairEnd { body(target[valueStart..<pairEnd], valueStart..<pairEnd) }
            }
            guard pairEnd < target.endIndex else { break }
            pairStart = target.index(after: pairEnd)
        }
    }
}
