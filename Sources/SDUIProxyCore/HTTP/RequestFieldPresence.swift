import NIOHTTP1

/// Which of the request fields a cache lookup asks about are present, found in one pass over the request's head.
///
/// A hit asked `HTTPHeaders` about each of them in turn (`Authorization`, the conditions, `Range`), and every
/// question compared the name of every field again: four walks over the head per hit. The router makes this once,
/// in the walk that finds the platform (``RequestRouter``), and the cache path tests bits.
public struct RequestFieldPresence: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let ifNoneMatch = RequestFieldPresence(rawValue: 1 << 0)
    public static let ifModifiedSince = RequestFieldPresence(rawValue: 1 << 1)
    public static let range = RequestFieldPresence(rawValue: 1 << 2)
    public static let cacheControl = RequestFieldPresence(rawValue: 1 << 3)
    public static let authorization = RequestFieldPresence(rawValue: 1 << 4)
    /// `X-Request-Id`: a hit returns the client's own id, and only a request that sent one is searched for it.
    public static let requestID = RequestFieldPresence(rawValue: 1 << 5)
    /// `Accept-Encoding`: the walk that notes it keeps its first value (``CacheRequest/acceptEncoding``).
    public static let acceptEncoding = RequestFieldPresence(rawValue: 1 << 6)

    /// A condition the cache answers with a 304 when it holds (RFC 9110 section 13.1).
    public static let conditions: RequestFieldPresence = [.ifNoneMatch, .ifModifiedSince]

    /// The fields of `headers` that are among these.
    public init(_ headers: HTTPHeaders) {
        var found: RequestFieldPresence = []
        for (name, _) in headers { found.formUnion(Self.of(name)) }
        self = found
    }

    /// What a field named `name` is among these; none for any other name. Told apart by length first: most names
    /// have none of these lengths.
    public static func of(_ name: String) -> RequestFieldPresence {
        switch name.utf8.count {
        case 5:
            return HTTPSyntax.equalsIgnoringCase(name, "range") ? .range : []
        case 12:
            return HTTPSyntax.equalsIgnoringCase(name, "x-request-id") ? .requestID : []
        case 13:
            if HTTPSyntax.equalsIgnoringCase(name, "if-none-match") { return .ifNoneMatch }
            if HTTPSyntax.equalsIgnoringCase(name, "authorization") { return .authorization }
            return HTTPSyntax.equalsIgnoringCase(name, "cache-control") ? .cacheControl : []
        case 15:
            return HTTPSyntax.equalsIgnoringCase(name, "accept-encoding") ? .acceptEncoding : []
        case 17:
            return HTTPSyntax.equalsIgnoringCase(name, "if-modified-since") ? .ifModifiedSince : []
        default:
            return []
        }
    }
}
