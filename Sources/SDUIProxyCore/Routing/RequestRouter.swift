import NIOHTTP1

/// Decides where a client's request goes, without I/O: admission (sizes, framing, target), the platform it is
/// for, then the cache path with its policy and key, a pass-through forward, a queued write, or a refusal.
///
/// The connection handlers route every request through it, and the prefetcher routes the requests it makes on a
/// client's behalf through ``cacheRequest(target:platform:headers:)``, so both key and fill an entry alike.
public struct RequestRouter: Sendable {
    /// Where a request goes. The rarer cases are boxed: a route is returned and moved on every request, and their
    /// payloads would make the cache path's copies several times larger. A forward's is not: every pass-through
    /// request allocated and freed its box (about 370 instructions), and measured unboxed, a hit costs the same.
    public enum Route: Sendable {
        /// GET or HEAD through the cache.
        case cache(CacheRequest)
        /// Forwarded to the backend with both bodies streamed. `cacheResult` is `bypass` on a route that
        /// bypasses the cache, nil for methods the cache does not take; `fields`, which of the fields the forward
        /// asks about the request has.
        case forward(target: RequestTarget, platform: String, cacheResult: CacheResult?, fields: RequestFieldPresence)
        /// A write on a queued route: its body is held whole (up to `maxBodyBytes`) so it can be stored durably
        /// when the backend cannot take it now.
        indirect case queuedWrite(
            target: RequestTarget,
            platform: String,
            route: QueueConfiguration.Route,
            maxBodyBytes: Int
        )
        /// Refused with `error`; when `closeConnection`, at once and the connection closes, since what follows
        /// cannot be trusted to be a request; otherwise once the request has been read.
        indirect case refuse(ProxyError, closeConnection: Bool)
        /// GET or HEAD of ``RequestRouter/queueStatusPrefix`` and a queued write's id: the write's public status,
        /// answered by the proxy itself once the request has been read. Only when the proxy has a write queue.
        indirect case queueStatus(id: String)

        /// The normalised path the request was routed by, without a copy; nil for a refusal and a queue status.
        public var path: Substring? {
            switch self {
            case .cache(let request): request.target.pathView
            case .forward(let target, _, _, _), .queuedWrite(let target, _, _, _): target.pathView
            case .refuse, .queueStatus: nil
            }
        }

        /// The platform the request was routed for; nil for a refusal and a queue status.
        public var platform: String? {
            switch self {
            case .cache(let request): request.platform
            case .forward(_, let platform, _, _), .queuedWrite(_, let platform, _, _): platform
            case .refuse, .queueStatus: nil
            }
        }
    }

    /// Where a client follows a queued write on the public listener: this, then the write's id. The `Location` of
    /// a 202 names it.
    public static let queueStatusPrefix = "/.sdui/queue/"

    /// This router's own, for what a connection keeps of what it read (``RepeatedRouteFields``).
    let identity = Identity()
    private let limits: ProxyConfiguration.Limits
    private let cache: ProxyConfiguration.Cache
    /// The policy of every path when no route has one of its own: no lookup per request.
    private let onlyPolicy: ProxyConfiguration.RoutePolicy?
    /// Whether any route streams request bodies: without one, no forward looks its route up.
    private let hasStreamingRoutes: Bool
    private let queue: QueueConfiguration?
    /// Whether there is a queue, read on every request: testing ``queue`` for nil copies the configuration.
    private let hasQueue: Bool
    /// The platform header, lower-cased.
    private let platformHeader: String
    /// Which of the fields the cache path asks about the platform header is, if any (nearly always none).
    private let platformHeaderField: RequestFieldPresence
    private let defaultPlatform: String
    private let allowedPlatforms: [String]
    /// The allowed names a request may use as they are, compared one by one: a platform list is a handful of
    /// short names, and hashing the request's value for a set cost every request about 280 instructions.
    private let usableAllowedPlatforms: [String]

    /// - Parameter queue: the write queue's configuration, when the proxy has one.
    public init(configuration: ProxyConfiguration, queue: QueueConfiguration?) {
        limits = configuration.limits
        cache = configuration.cache
        onlyPolicy = configuration.cache.routes.isEmpty ? configuration.cache.policy : nil
        hasStreamingRoutes = configuration.cache.routes.contains { $0.policy.bypass && $0.policy.stream }
        self.queue = queue
        hasQueue = queue != nil
        platformHeader = configuration.platform.header.lowercased()
        platformHeaderField = RequestFieldPresence.of(platformHeader)
        defaultPlatform = configuration.platform.defaultValue
        allowedPlatforms = configuration.platform.allowed
        // Only names a request may use as they are: the loader checks them, a configuration made in code may not.
        usableAllowedPlatforms = configuration.platform.allowed.filter(PlatformValue.isValid)
    }

    /// A router's identity, made with it: a configuration reloaded makes a router with another. Compared by
    /// reference.
    final class Identity: Sendable {}

    /// What the platform walk read of a head's fields: the platform (or why there is none), the fields the cache
    /// path asks about, the first `Accept-Encoding`.
    struct PlatformReading {
        var platform: Result<String, ProxyError>
        var fields: RequestFieldPresence
        var acceptEncoding: String?
    }

    /// Where `head` goes.
    ///
    /// - Parameter repeated: the connection's record of what routing read of its last head's fields, taken when
    ///   `head` has the same fields and kept for the next head otherwise (nil: every head's are read).
    public func route(_ head: HTTPRequestHead, repeating repeated: RepeatedRouteFields? = nil) -> Route {
        let headers = head.headers
        let kept = repeated?.reading(of: headers, by: identity)
        let admission = kept?.admission ?? RequestAdmission.FieldFacts(of: headers)
        let target: RequestTarget
        do {
            target = try RequestAdmission.admit(head, fields: admission, limits: limits)
        } catch {
            return .refuse(error.error, closeConnection: error.closeConnection)
        }
        // Only a proxy with a queue answers its status path; one without pays a flag's test.
        if hasQueue, head.method.isGETOrHEAD, let id = Self.queueStatusID(in: target.path) {
            return .queueStatus(id: id)
        }
        let reading = kept?.platform ?? platformReading(of: headers)
        if kept == nil {
            repeated?.keep(.init(of: headers, by: identity, admission: admission, platform: reading))
        }
        let platform: String
        let fields = reading.fields
        let acceptEncoding = reading.acceptEncoding
        switch reading.platform {
        case .success(let value): platform = value
        case .failure(let error): return .refuse(error, closeConnection: false)
        }
        guard head.method.isGETOrHEAD else {
            if let queue, let route = queue.route(method: head.method.rawValue, path: target.path) {
                let declared = headers[canonicalForm: "content-length"].first.flatMap { Int($0) } ?? 0
                guard declared <= queue.maxBodyBytes else {
                    return .refuse(Self.queuedBodyTooLarge(limit: queue.maxBodyBytes), closeConnection: true)
                }
                return .queuedWrite(target: target, platform: platform, route: route, maxBodyBytes: queue.maxBodyBytes)
            }
            return .forward(target: target, platform: platform, cacheResult: nil, fields: fields)
        }
        let policy = onlyPolicy ?? cache.policy(forPath: target.path)
        guard !policy.bypass else {
            return .forward(target: target, platform: platform, cacheResult: .bypass, fields: fields)
        }
        return .cache(
            CacheRequest(
                head: head,
                target: target,
                platform: platform,
                policy: policy,
                key: cacheKey(target: target, platform: platform, headers: headers, policy: policy),
                fields: fields,
                acceptEncoding: acceptEncoding
            )
        )
    }

    /// The cache request a client of `platform` would make for `target` with `headers`, or nil when the target's
    /// route bypasses the cache.
    public func cacheRequest(target: RequestTarget, platform: String, headers: HTTPHeaders) -> CacheRequest? {
        let policy = onlyPolicy ?? cache.policy(forPath: target.path)
        guard !policy.bypass else { return nil }
        return CacheRequest(
            head: HTTPRequestHead(version: .http1_1, method: .GET, uri: target.description, headers: headers),
            target: target,
            platform: platform,
            policy: policy,
            key: cacheKey(target: target, platform: platform, headers: headers, policy: policy)
        )
    }

    /// Whether a forwarded request for `target` streams its body to the backend as it arrives (its route bypasses
    /// the cache and says `stream: true`), rather than having it read whole before a backend connection is taken.
    public func streamsBody(of target: RequestTarget) -> Bool {
        guard hasStreamingRoutes else { return false }
        let policy = cache.policy(forPath: target.path)
        return policy.bypass && policy.stream
    }

    /// The id in a path under ``queueStatusPrefix``: the one segment after it, nil when there is none or more.
    public static func queueStatusID(in path: String) -> String? {
        guard path.hasPrefix(queueStatusPrefix) else { return nil }
        let id = path.dropFirst(queueStatusPrefix.count)
        guard !id.isEmpty, !id.contains("/") else { return nil }
        return String(id)
    }

    /// The error for a queued write whose body exceeds `queue.maxBodyBytes`.
    public static func queuedBodyTooLarge(limit: Int) -> ProxyError {
        ProxyError(.tooLarge, "the request body exceeds queue.maxBodyBytes (\(limit) bytes)")
    }

    /// The platform a request is for: its platform header, upper-cased, or the configured default.
    public func platform(of headers: HTTPHeaders) throws(ProxyError) -> String {
        var fields: RequestFieldPresence = []
        var acceptEncoding: String?
        return try platform(of: headers, noting: &fields, acceptEncoding: &acceptEncoding)
    }

    /// ``platform(of:noting:acceptEncoding:)`` as a value.
    func platformReading(of headers: HTTPHeaders) -> PlatformReading {
        var fields: RequestFieldPresence = []
        var acceptEncoding: String?
        let platform: Result<String, ProxyError>
        do {
            platform = .success(try self.platform(of: headers, noting: &fields, acceptEncoding: &acceptEncoding))
        } catch {
            platform = .failure(error)
        }
        return PlatformReading(platform: platform, fields: fields, acceptEncoding: acceptEncoding)
    }

    /// ``platform(of:)``, noting in `fields` the fields the cache path asks about and in `acceptEncoding` the
    /// first `Accept-Encoding`, in the same walk over the head: one walk, where asking `HTTPHeaders` for each name
    /// walked it once per name.
    func platform(
        of headers: HTTPHeaders,
        noting fields: inout RequestFieldPresence,
        acceptEncoding: inout String?
    ) throws(ProxyError) -> String {
        var found: String?
        var count = 0
        for (name, value) in headers {
            let field: RequestFieldPresence
            if name.utf8.count == platformHeader.utf8.count, HTTPSyntax.sameIgnoringCase(name, platformHeader) {
                found = value
                count += 1
                // Noted all the same when the configuration names one of these fields as the platform header; what
                // that field is was found once, not per request.
                field = platformHeaderField
            } else {
                field = RequestFieldPresence.of(name)
            }
            if field == .acceptEncoding, !fields.contains(.acceptEncoding) { acceptEncoding = value }
            fields.formUnion(field)
        }
        guard count <= 1 else { throw ProxyError(.badRequest, "more than one \(platformHeader) header") }
        guard let value = found else { return defaultPlatform }
        // Most clients send an allowed name as it is configured: valid and allowed, used as it is, hashed once.
        if usableAllowedPlatforms.contains(value) { return value }
        let platform = value.trimmingWhitespace().uppercased()
        guard PlatformValue.isValid(platform) else {
            throw ProxyError(.badRequest, "\(platformHeader) must be a platform name like IOS, ANDROID or WEB")
        }
        guard allowedPlatforms.isEmpty || usableAllowedPlatforms.contains(platform) else {
            throw ProxyError(
                .badRequest,
                "unknown platform \(platform); allowed: \(allowedPlatforms.joined(separator: ", "))"
            )
        }
        return platform
    }

    /// The cache key of a component request: target, platform, and the values of the policy's `vary` headers.
    public func cacheKey(
        target: RequestTarget,
        platform: String,
        headers: HTTPHeaders,
        policy: ProxyConfiguration.RoutePolicy
    ) -> CacheKey {
        CacheKey.forRoute(
            target: target.description,
            platform: platform,
            headers: headers,
            vary: policy.vary,
            platformHeader: platformHeader
        )
    }
}
