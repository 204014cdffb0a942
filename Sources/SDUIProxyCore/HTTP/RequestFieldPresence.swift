import NIOHTTP1

/// Which of the request fields the request path asks about are present, found in one pass over the request's head.
///
/// A hit asked `HTTPHeaders` about each of them in turn (`Authorization`, the conditions, `Range`), and every
/// question compared the name of every field again: four walks over the head per hit. The router makes this once,
/// in the walk that finds the platform (``RequestRouter``), and the cache path tests bits. A forward tests them too:
/// whether the request frames a body, names fields in `Connection` or sends its own id, each of which was a search
/// of the head by name (about 180 instructions each) for fields most requests never send.
public struct RequestFieldPresence: OptionSet, Sendable, Hashable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let ifNoneMatch = RequestFieldPresence(rawValue: 1 << 0)
    public static let ifModifiedSince = RequestFieldPresence(rawValue: 1 << 1)
    public static let range = RequestFieldPresence(rawValue: 1 << 2)
    public static let cacheControl = RequestFieldPresence(rawValue: 1 << 3)
    public static let authorization = RequestFieldPresence(rawValue: 1 << 4)
    /// `X-Request-Id`: a hit returns the client's own id, and only a request that sent one is searched for it.
    public static let requestID = RequestFieldPresence(rawValue: 1 << 5)
    /// `Accept-Encoding`: the walk that notes it keeps its first value (``CacheRequest/acceptEncoding``).
    public static let acceptEncoding = RequestFieldPresence(rawValue: 1 << 6)
    /// `Connection`: only a request that sent one can name further fields as hop-by-hop.
    public static let connection = RequestFieldPresence(rawValue: 1 << 7)
    /// `Content-Length` and `Transfer-Encoding`: a request with neither has no body.
    public static let contentLength = RequestFieldPresence(rawValue: 1 << 8)
    public static let transferEncoding = RequestFieldPresence(rawValue: 1 << 9)

    /// A condition the cache answers with a 304 when it holds (RFC 9110 section 13.1).
    public static let conditions: RequestFieldPresence = [.ifNoneMatch, .ifModifiedSince]

    /// Whether these notes stand for `headers`: every field among these that they hold is noted (the notes may
    /// say more, never less). What code that skips a search on the notes' word asserts.
    public func cover(_ headers: HTTPHeaders) -> Bool {
        RequestFieldPresence(headers).isSubset(of: self)
    }

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
        case 10:
            return HTTPSyntax.equalsIgnoringCase(name, "connection") ? .connection : []
        case 12:
            return HTTPSyntax.equalsIgnoringCase(name, "x-request-id") ? .requestID : []
        case 13:
            if HTTPSyntax.equalsIgnoringCase(name, "if-none-match") { return .ifNoneMatch }
            if HTTPSyntax.equalsIgnoringCase(name, "authorization") { return .authorization }
            return HTTPSyntax.equalsIgnoringCase(name, "cache-control") ? .cacheControl : []
        case 14:
            return HTTPSyntax.equalsIgnoringCase(name, "content-length") ? .contentLength : []
        case 15:
            return HTTPSyntax.equalsIgnoringCase(name, "accept-encoding") ? .acceptEncoding : []
        case 17:
            if HTTPSyntax.equalsIgnoringCase(name, "if-modified-since") { return .ifModifiedSince }
            return HTTPSyntax.equalsIgnoringCase(name, "transfer-encoding") ? .transferEncoding : []
        default:
            return []
        }
    }
}
