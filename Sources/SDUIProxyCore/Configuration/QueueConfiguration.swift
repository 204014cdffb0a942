import Yams

/// The durable write queue (config key `queue`): which requests are kept when the backend cannot take them,
/// how they are delivered later, and what runs once they are delivered or given up.
///
/// A route opts in with its method and path prefix; requests on other routes are forwarded as before. When the
/// `queue` key is absent the feature is off.
public struct QueueConfiguration: Sendable, Equatable {
    /// The durable store: a directory, where the SQLite file `queue.sqlite` lives, or a `postgres://` URL of a
    /// database the replicas share (see ``storeLocation``).
    public var store = "/var/lib/sdui-proxy/queue"
    /// How long a replica holds a request it is delivering from a shared store; a replica that stops renewing
    /// its lease for this long is taken to be gone, and another may deliver the request.
    public var leaseTimeout: Duration = .seconds(30)
    /// The most requests waiting for delivery at once; one more is refused with 503.
    public var maxDepth = 100_000
    /// The largest request body that is queued; a larger one is refused with 413.
    public var maxBodyBytes = 1 << 20
    /// Backend statuses after which a delivery is tried again (network errors and timeouts always are).
    public var retryableStatuses: Set<Int> = [502, 503, 504]
    /// How many deliveries run at once over all `concurrent` routes.
    public var concurrency = 16
    /// How long a delivered or failed request stays in the store, so its status can be read.
    public var retention: Duration = .seconds(86400)
    /// The queued routes; the longest matching prefix wins.
    public var routes: [Route] = []
    /// What runs when a request reaches its final outcome, in file order.
    public var handlers: [Handler] = []

    /// The defaults: no routes, no handlers.
    public init() {}

    /// Whether a route keeps arrival order.
    public enum Ordering: String, Sendable, Equatable, CaseIterable {
        /// One at a time, in arrival order: a request is sent only after the one ahead of it was delivered or
        /// finally failed.
        case sequential
        /// In parallel, bounded by ``QueueConfiguration/concurrency``.
        case concurrent
    }

    /// When a request is tried again, and when it is given up.
    public struct RetryPolicy: Sendable, Equatable {
        /// The most delivery attempts, the first one included.
        public var maxAttempts = 20
        /// The wait after the first failed attempt; it doubles after each further one.
        public var backoff: Duration = .milliseconds(500)
        /// The longest wait between two attempts.
        public var maxBackoff: Duration = .seconds(30)
        /// How long after it was queued a request is given up.
        public var maxAge: Duration = .seconds(86400)

        /// The defaults: 20 attempts, 500 ms doubling up to 30 s, given up after 24 h.
        public init() {}

        /// A policy with the given limits.
        public init(maxAttempts: Int, backoff: Duration, maxBackoff: Duration, maxAge: Duration) {
            self.maxAttempts = maxAttempts
            self.backoff = backoff
            self.maxBackoff = maxBackoff
            self.maxAge = maxAge
        }

        /// The wait after `attempts` failed attempts: `backoff * 2^(attempts-1)`, capped at ``maxBackoff``,
        /// with "equal jitter" (a random point in its upper half), so retries of many requests spread out.
        ///
        /// - Parameter unitRandom: a number in `0...1` (the jitter); 1 gives the full wait.
        public func delay(afterAttempts attempts: Int, unitRandom: Double) -> Duration {
            let exponent = max(0, min(attempts - 1, 40))
            let base = backoff.secondsValue * Double(UInt64(1) << UInt64(exponent))
            let capped = min(base, maxBackoff.secondsValue)
            let jittered = capped / 2 + capped / 2 * min(max(unitRandom, 0), 1)
            return .nanoseconds(Int64(jittered * 1e9))
        }
    }

    /// A queued route: requests with this method whose path starts with this prefix.
    public struct Route: Sendable, Equatable {
        /// The method, upper case (`POST`).
        public var method: String
        /// A path prefix starting with `/`; it matches whole segments (`/api/orders` matches `/api/orders` and
        /// `/api/orders/7`, not `/api/orders-export`).
        public var pathPrefix: String
        /// Whether its requests keep arrival order.
        public var ordering: Ordering
        /// When its requests are tried again and given up.
        public var retry: RetryPolicy
        /// Whether its writes create entities under a client's local identifier (`creates`), and where the local
        /// and the backend's identifiers are read; nil for other writes.
        public var creates: CreateRule?

        /// A route for `method` (made upper case) under `pathPrefix`.
        public init(
            method: String,
            pathPrefix: String,
            ordering: Ordering = .sequential,
            retry: RetryPolicy = .init(),
            creates: CreateRule? = nil
        ) {
            self.method = method.uppercased()
            self.pathPrefix = pathPrefix
            self.ordering = ordering
            self.retry = retry
            self.creates = creates
        }

        /// The route's name, as written after `match:` (`POST /api/orders`); queued requests are stored under it.
        public var key: String { "\(method) \(pathPrefix)" }

        /// Whether `path` (without query) is under ``pathPrefix``.
        public func matches(path: String) -> Bool {
            PathPrefix(pathPrefix).matches(path)
        }
    }

    /// A final outcome of a queued request.
    public enum Outcome: String, Sendable, Equatable, Hashable, CaseIterable {
        /// The backend answered 2xx or 3xx.
        case delivered
        /// The backend answered a status that is not retried, or the attempts or the age ran out.
        case failed
        /// A create it depends on failed (or its answer named no backend identifier): it was never sent.
        case dependencyFailed
    }

    /// Something done when a queued request reaches a final outcome.
    public struct Handler: Sendable, Equatable {
        /// What the handler does.
        public enum Action: Sendable, Equatable {
            /// Removes cached responses whose target starts with this path prefix.
            case invalidatePrefix(String)
            /// Removes cached responses carrying this tag.
            case invalidateTag(String)
            /// POSTs `{"id", "route", "outcome", "status"}` as JSON to this absolute http(s) URL.
            case webhook(String)
        }

        /// The outcomes it runs on (`on:`; both by default).
        public var outcomes: Set<Outcome>
        /// The key of the only route it runs for (`match:`, like a route's), or nil for every route.
        public var route: String?
        /// What it does.
        public var action: Action

        /// A handler doing `action` on `outcomes`, for `route` only when given.
        public init(outcomes: Set<Outcome> = Set(Outcome.allCases), route: String? = nil, action: Action) {
            self.outcomes = outcomes
            self.route = route
            self.action = action
        }

        /// Whether it runs for `outcome` of a request on the route named `routeKey`.
        public func applies(to outcome: Outcome, routeKey: String) -> Bool {
            outcomes.contains(outcome) && (route == nil || route == routeKey)
        }
    }

    /// How often finished requests older than ``retention`` are removed: a tenth of it, between 1 s and a minute.
    public var cleanupInterval: Duration {
        min(max(retention / 10, .seconds(1)), .seconds(60))
    }

    /// ``store`` read as a location: a SQLite directory or a PostgreSQL database.
    ///
    /// - Throws: ``PostgresURL/ParseError`` when ``store`` has a PostgreSQL scheme but cannot be read, which a
    ///   configuration from ``ConfigurationLoader`` never has.
    public var storeLocation: QueueStoreLocation {
        get throws(PostgresURL.ParseError) { try QueueStoreLocation(parsing: store) }
    }

    /// The route a request with `method` on `path` is queued under: the longest matching prefix with that
    /// method, or nil when it is not queued. A query in `path` is ignored.
    public func route(method: String, path: String) -> Route? {
        let pathOnly =
            path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? path
        var best: Route?
        for route in routes where route.method == method && route.matches(path: pathOnly) {
            if best == nil || route.pathPrefix.utf8.count > best!.pathPrefix.utf8.count { best = route }
        }
        return best
    }

    // MARK: Parsing

    /// The keys of the `queue` section.
    static let keys: Set<String> = [
        "store", "maxDepth", "maxBodyBytes", "retryableStatuses", "concurrency", "retention", "routes", "handlers",
        "leaseTimeout",
    ]

    /// Reads the `queue` section; every key has a default, and problems name the key path.
    static func parse(_ section: ConfigurationSection) throws(ConfigurationError) -> QueueConfiguration {
        try section.rejectUnknownKeys(keys)
        var queue = QueueConfiguration()
        queue.store = try section.string("store", default: queue.store)
        guard !queue.store.isEmpty else {
            throw section.fail("store", "must be a directory path or a postgres:// URL")
        }
        if PostgresURL.hasPostgresScheme(queue.store) {
            _ = try ClusterConfiguration.parsePostgresURL(queue.store, key: "store", in: section)
        }
        queue.leaseTimeout = try section.duration("leaseTimeout", default: queue.leaseTimeout)
        guard queue.leaseTimeout > .zero else { throw section.fail("leaseTimeout", "must be more than 0") }
        queue.maxDepth = try section.int("maxDepth", default: queue.maxDepth, in: 1...100_000_000)
        queue.maxBodyBytes = try section.byteSize("maxBodyBytes", default: queue.maxBodyBytes)
        guard queue.maxBodyBytes <= 1 << 30 else { throw section.fail("maxBodyBytes", "must be at most 1GiB") }
        let statuses = try section.stringList(
            "retryableStatuses",
            default: queue.retryableStatuses.sorted().map(String.init)
        )
        queue.retryableStatuses = []
        for text in statuses {
            guard let status = Int(text), (400...599).contains(status) else {
                throw section.fail("retryableStatuses", "\"\(text)\" is not a status between 400 and 599")
            }
            queue.retryableStatuses.insert(status)
        }
        queue.concurrency = try section.int("concurrency", default: queue.concurrency, in: 1...10_000)
        queue.retention = try section.duration("retention", default: queue.retention)
        guard queue.retention > .zero else { throw section.fail("retention", "must be more than 0") }

        var seen: Set<String> = []
        for routeSection in try section.sectionList("routes") {
            let route = try parseRoute(routeSection)
            guard seen.insert(route.key).inserted else {
                throw routeSection.fail("match", "\(route.key) is listed twice")
            }
            queue.routes.append(route)
        }
        for handlerSection in try section.sectionList("handlers") {
            queue.handlers.append(try parseHandler(handlerSection, routes: seen))
        }
        return queue
    }

    /// Reads the `queue` key of a whole config file given as YAML text (nil when the key is absent), with
    /// `environment` laid over it like ``ConfigurationLoader`` does.
    static func parse(
        yaml: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> QueueConfiguration? {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(key: "(file)", problem: "not valid YAML: \(error)")
        }
        let top = try ConfigurationSection(path: [], node: root, environment: environment, log: .init())
        guard top.mapping["queue"] != nil || environment.keys.contains(where: { $0.hasPrefix("SDUI_PROXY_QUEUE_") })
        else { return nil }
        return try parse(top.section("queue"))
    }

    private static func parseRoute(_ section: ConfigurationSection) throws(ConfigurationError) -> Route {
        try section.rejectUnknownKeys(["match", "ordering", "retry", "creates"])
        let (method, prefix) = try parseMatch(section)
        guard let method, let prefix else { throw section.fail("match", "is required, like \"POST /api/orders\"") }
        let orderingText = try section.string("ordering", default: Ordering.sequential.rawValue)
        guard let ordering = Ordering(rawValue: orderingText) else {
            throw section.fail("ordering", "\"\(orderingText)\" is not sequential or concurrent")
        }
        let retrySection = try section.section("retry")
        try retrySection.rejectUnknownKeys(["maxAttempts", "backoff", "maxBackoff", "maxAge"])
        var retry = RetryPolicy()
        retry.maxAttempts = try retrySection.int("maxAttempts", default: retry.maxAttempts, in: 1...1_000_000)
        retry.backoff = try retrySection.duration("backoff", default: retry.backoff)
        guard retry.backoff > .zero else { throw retrySection.fail("backoff", "must be more than 0") }
        retry.maxBackoff = try retrySection.duration("maxBackoff", default: retry.maxBackoff)
        guard retry.maxBackoff >= retry.backoff else {
            throw retrySection.fail("maxBackoff", "must be at least the backoff")
        }
        retry.maxAge = try retrySection.duration("maxAge", default: retry.maxAge)
        guard retry.maxAge > .zero else { throw retrySection.fail("maxAge", "must be more than 0") }
        let creates = try section.names("creates") ? try parseCreateRule(try section.section("creates")) : nil
        return Route(method: method, pathPrefix: prefix, ordering: ordering, retry: retry, creates: creates)
    }

    /// Reads `creates: { localId: ..., remoteId: ... }`: each a `{ header: Name }`, a `{ json: /pointer }`, or a
    /// `{ header: Name, pattern: "/path/{id}" }`.
    private static func parseCreateRule(_ section: ConfigurationSection) throws(ConfigurationError) -> CreateRule {
        try section.rejectUnknownKeys(["localId", "remoteId"])
        for key in ["localId", "remoteId"] where try !section.names(key) {
            throw section.fail(key, "is required, like { header: X-Local-Id } or { json: /id }")
        }
        return CreateRule(
            localId: try parseIdentifierSource(try section.section("localId")),
            remoteId: try parseIdentifierSource(try section.section("remoteId"))
        )
    }

    private static func parseIdentifierSource(
        _ section: ConfigurationSection
    ) throws(ConfigurationError) -> CreateRule.Source {
        try section.rejectUnknownKeys(["header", "json", "pattern"])
        let header = try section.string("header", default: "")
        let json = try section.string("json", default: "")
        let pattern = try section.string("pattern", default: "")
        switch (header.isEmpty, json.isEmpty) {
        case (false, true):
            guard HTTPSyntax.isToken(header) else { throw section.fail("header", "\"\(header)\" is not a header name") }
            guard !pattern.isEmpty else { return .header(header) }
            guard pattern.contains("{id}"), HTTPSyntax.isFieldValue(pattern) else {
                throw section.fail("pattern", "\"\(pattern)\" must hold {id}, like \"/api/orders/{id}\"")
            }
            return .headerPattern(header, pattern: pattern)
        case (true, false):
            guard pattern.isEmpty else { throw section.fail("pattern", "goes with header, not json") }
            guard let pointer = JSONPointer(json), !pointer.tokens.isEmpty else {
                throw section.fail("json", "\"\(json)\" is not a JSON pointer to a member, like /id")
            }
            return .json(pointer)
        default:
            throw section.fail(
                header.isEmpty ? "header" : "json",
                "exactly one of header or json is needed, like { header: X-Local-Id } or { json: /id }"
            )
        }
    }

    /// Reads `match: METHOD /prefix`; both nil when the key is absent.
    private static func parseMatch(_ section: ConfigurationSection) throws(ConfigurationError) -> (String?, String?) {
        let text = try section.string("match", default: "")
        if text.isEmpty { return (nil, nil) }
        let parts = text.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard parts.count == 2 else {
            throw section.fail("match", "\"\(text)\" is not a method and a path prefix, like \"POST /api/orders\"")
        }
        let method = String(parts[0])
        let prefix = String(parts[1])
        guard method.utf8.allSatisfy({ $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) else {
            throw section.fail("match", "\"\(method)\" is not an upper-case HTTP method")
        }
        guard method != "GET", method != "HEAD" else {
            throw section.fail("match", "\(method) requests are reads; only writes can be queued")
        }
        guard prefix.hasPrefix("/"), !prefix.contains("?" as Character), HTTPSyntax.isFieldValue(prefix) else {
            throw section.fail("match", "\"\(prefix)\" is not a path prefix starting with / (without a query)")
        }
        return (method, prefix)
    }

    private static func parseHandler(
        _ section: ConfigurationSection,
        routes: Set<String>
    ) throws(ConfigurationError) -> Handler {
        let actionKeys = ["invalidatePrefix", "invalidateTag", "webhook"]
        try section.rejectUnknownKeys(Set(actionKeys + ["on", "match"]))
        var outcomes: Set<Outcome> = []
        for text in try section.stringList("on", default: Outcome.allCases.map(\.rawValue)) {
            guard let outcome = Outcome(rawValue: text) else {
                throw section.fail("on", "\"\(text)\" is not delivered, failed or dependencyFailed")
            }
            outcomes.insert(outcome)
        }
        guard !outcomes.isEmpty else { throw section.fail("on", "must list at least one outcome") }

        var route: String?
        let (method, prefix) = try parseMatch(section)
        if let method, let prefix {
            let key = "\(method) \(prefix)"
            guard routes.contains(key) else { throw section.fail("match", "\(key) is not one of queue.routes") }
            route = key
        }

        var actions: [Handler.Action] = []
        let prefixText = try section.string("invalidatePrefix", default: "")
        if !prefixText.isEmpty {
            guard prefixText.hasPrefix("/") else {
                throw section.fail("invalidatePrefix", "must be a path starting with /")
            }
            actions.append(.invalidatePrefix(prefixText))
        }
        let tag = try section.string("invalidateTag", default: "")
        if !tag.isEmpty { actions.append(.invalidateTag(tag)) }
        let webhook = try section.string("webhook", default: "")
        if !webhook.isEmpty {
            guard AbsoluteURL(parsing: webhook) != nil else {
                let shown = ConfigurationPrinter.redactingURLCredentials(webhook)
                throw section.fail("webhook", "\"\(shown)\" is not an absolute http:// or https:// URL")
            }
            actions.append(.webhook(webhook))
        }
        guard actions.count == 1, let action = actions.first else {
            throw ConfigurationError(
                key: section.path.joined(separator: "."),
                problem: "a handler needs exactly one of \(actionKeys.joined(separator: ", "))"
            )
        }
        return Handler(outcomes: outcomes, route: route, action: action)
    }
}
