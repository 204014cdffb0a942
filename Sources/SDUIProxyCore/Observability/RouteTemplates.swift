/// The path templates of `metrics.routes`, matched against request paths: which label value a request counts
/// under.
///
/// A template is a path whose segments are literal or a `{name}` that stands for any one non-empty segment
/// (`/screens/products/{id}`). The first template in list order that matches the whole path wins; a path that
/// matches none is ``other``, so the label's values are bounded by the configuration, whatever clients send.
/// Matching reads the path's bytes in place and allocates nothing.
public struct RouteTemplates: Sendable, Equatable {
    private enum Segment: Sendable, Equatable {
        case literal([UInt8])
        case any
    }

    private let templates: [[Segment]]
    /// The label values: each template as written, then `other`.
    public let labels: [String]

    /// The label of paths that match no template.
    public static let otherLabel = "other"

    /// The templates of `routes`, which ``problem(with:)`` found nothing wrong with.
    public init(_ routes: [String]) {
        templates = routes.map(Self.segments)
        labels = routes + [Self.otherLabel]
    }

    /// The index in ``labels`` of the first template `path` (without its query) matches; the last index, `other`,
    /// when none does.
    public func index(of path: Substring) -> Int {
        var path = path
        return path.withUTF8 { bytes in
            for (index, template) in templates.enumerated() where Self.matches(template, bytes) {
                return index
            }
            return templates.count
        }
    }

    /// Why `template` cannot be one, or nil when it can.
    public static func problem(with template: String) -> String? {
        guard template.hasPrefix("/") else { return "\"\(template)\" must be a path starting with /" }
        guard !template.contains("?"), HTTPSyntax.isFieldValue(template), !template.contains(" ") else {
            return "\"\(template)\" must be a path without a query or spaces"
        }
        for segment in template.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        where segment.contains("{") || segment.contains("}") {
            guard segment.hasPrefix("{"), segment.hasSuffix("}"), segment.count > 2,
                segment.dropFirst().dropLast().allSatisfy({ $0 != "{" && $0 != "}" })
            else { return "\"\(template)\": a {name} must be a whole segment, like /screens/products/{id}" }
        }
        return nil
    }

    private static func segments(_ template: String) -> [Segment] {
        template.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { segment in
            segment.hasPrefix("{") && segment.hasSuffix("}") ? .any : .literal(Array(segment.utf8))
        }
    }

    /// Whether `path` (its bytes after the leading `/`, segment by segment) is exactly `template`.
    private static func matches(_ template: [Segment], _ path: UnsafeBufferPointer<UInt8>) -> Bool {
        let slash = UInt8(ascii: "/")
        guard path.first == slash else { return false }
        var position = 1
        for (number, segment) in template.enumerated() {
            var end = position
            while end < path.count, path[end] != slash { end += 1 }
            switch segment {
            case .literal(let literal):
                guard end - position == literal.count else { return false }
                for offset in 0..<literal.count where path[position + offset] != literal[offset] { return false }
            case .any:
                guard end > position else { return false }
            }
            if number == template.count - 1 { return end == path.count }
            guard end < path.count else { return false }
            position = end + 1
        }
        return false
    }
}
