import NIOHTTP1

/// A request answered through the cache: what it asked for, for which platform, under which policy and key.
///
/// A class, so that moving it from the router to a responder and into a fetch's completion costs one reference
/// count, not one per field.
public final class CacheRequest: Sendable {
    /// The client's request head (for a prefetch, the head a client of the platform would send).
    public let head: HTTPRequestHead
    public let target: RequestTarget
    /// The platform the component is for, as the platform header names it.
    public let platform: String
    public let policy: ProxyConfiguration.RoutePolicy
    public let key: CacheKey
    /// Which of the fields the cache path asks about the head carries.
    public let fields: RequestFieldPresence
    /// The value of the request's first `Accept-Encoding`, which picks the stored form a hit is sent in.
    public let acceptEncoding: String?

    /// - Parameters:
    ///   - fields: which of the fields the cache path asks about `head` carries, and `acceptEncoding` its first
    ///     `Accept-Encoding`, when the router noted both as it walked the head; nil to find them here.
    public init(
        head: HTTPRequestHead,
        target: RequestTarget,
        platform: String,
        policy: ProxyConfiguration.RoutePolicy,
        key: CacheKey,
        fields: RequestFieldPresence? = nil,
        acceptEncoding: String? = nil
    ) {
        self.head = head
        self.target = target
        self.platform = platform
        self.policy = policy
        self.key = key
        if let fields {
            assert(
                fields.contains(.acceptEncoding) == (acceptEncoding != nil),
                "fields noted without the Accept-Encoding they found, or the other way round"
            )
            self.fields = fields
            self.acceptEncoding = acceptEncoding
        } else {
            self.fields = RequestFieldPresence(head.headers)
            self.acceptEncoding = head.headers.first(name: "accept-encoding")
        }
    }

    /// A HEAD request: answered like a GET, without the body.
    public var isHead: Bool { head.method.isHEAD }
}
