import NIOCore

/// Finds the screens a user will open next: the `shouldPrefetch` navigation actions of a component, resolved
/// to request targets on this proxy (the seed's ViewClient `prefetch`, driven by the component itself).
///
/// A navigation action is an object whose `_beagleAction_` is `beagle:pushView`, `beagle:pushStack`,
/// `beagle:resetStack` or `beagle:resetApplication` (in any letter case) and whose `route` has
/// `"shouldPrefetch": true` and a string `url`. Actions without that flag are not collected at all.
///
/// Each URL is built the way Beagle clients build it (``BeagleURLBuilder``) and must name a screen that this
/// proxy serves; the proxy is never steered to fetch from other hosts:
/// - a URL that starts with `/` is relative to the upstream base: its target is that path and query;
/// - an absolute `http(s)` URL on the upstream's own origin (scheme, host and port) must lie under the
///   upstream's base path; its target is the rest (upstream `http://b:8081/bff`, URL
///   `http://b:8081/bff/screens/x`, target `/screens/x`);
/// - an absolute `http(s)` URL whose host is one of `allowedHosts` (other public names of this proxy or
///   backend) has its path and query as target;
/// - anything else is skipped with a ``Reason``: URLs with an expression `@{...}` (the device resolves
///   them), routes that ask for a request other than a plain GET, other hosts, other schemes, paths without
///   a leading `/`, and targets ``RequestTarget`` rejects.
///
/// Targets are normalised with ``RequestTarget``, so they are the proxy's cache-key paths.
///
/// A hostile document cannot make the planner do unbounded work: one pass reads each byte once and keeps only
/// the members of actions, does not look at actions below ``maximumDepth`` levels, stops once
/// ``maximumTargets`` distinct targets are found and records at most ``maximumSkipped`` skipped URLs;
/// ``Plan/truncated`` says when a limit cut something off.
public struct PrefetchPlanner: Sendable {
    /// The deepest nesting level whose actions are read; the root is level 0, its members and elements level 1.
    public static let maximumDepth = 64
    /// The most distinct targets one component yields; planning stops when another one is found.
    public static let maximumTargets = 64
    /// The most distinct skipped URLs one plan records.
    public static let maximumSkipped = 64

    /// The `_beagleAction_` values, lower-cased, of the actions that open a screen from a `route`.
    public static let navigationActions = Set(navigationActionSpellings.map { "\($0)" })

    /// ``navigationActions`` as the planner compares them, read by both event loops on every miss: static text
    /// in an array, so that comparing them retains nothing those loops share (iterating the set did, once per
    /// member and action).
    private static let navigationActionSpellings: [StaticString] = [
        "beagle:pushview", "beagle:pushstack", "beagle:resetstack", "beagle:resetapplication",
    ]

    /// The most actions (of any kind) one component is scanned for; past that the plan is truncated.
    public static let maximumActions = 1024
    private static let actionKey = Key.action.name
    /// The members the planner reads: an action's name and route, and the route's fields, in ``Key``'s order.
    private static let keptKeys = JSONParser.KeySet(Key.allCases.map(\.name))
    /// The kept keys, each with the index a scan's members name it by (its raw value, its place in `keptKeys`): a
    /// constant, where an index looked up once in a lazily made static cost a check of that static on every read,
    /// a dozen a planned component.
    private enum Key: Int, CaseIterable {
        case action, route, url, shouldPrefetch, httpAdditionalData, method, body

        var name: String {
            switch self {
            case .action: "_beagleAction_"
            case .route: "route"
            case .url: "url"
            case .shouldPrefetch: "shouldPrefetch"
            case .httpAdditionalData: "httpAdditionalData"
            case .method: "method"
            case .body: "body"
            }
        }
    }

    /// What a component's prefetchable navigation actions resolve to.
    public struct Plan: Equatable, Sendable {
        /// Normalised request targets (`/path?query`), without duplicates, in the order their actions appear
        /// in the component.
        public var targets: [String]
        /// The prefetchable actions whose URL cannot be prefetched, without duplicates, in the order they appear.
        public var skipped: [Skipped]
        /// Whether a limit (depth, targets or skipped URLs) left part of the component unplanned.
        public var truncated: Bool

        public init(targets: [String] = [], skipped: [Skipped] = [], truncated: Bool = false) {
            self.targets = targets
            self.skipped = skipped
            self.truncated = truncated
        }
    }

    /// A prefetchable action's URL that the planner will not fetch, and why.
    public struct Skipped: Hashable, Sendable {
        /// The URL as the component states it.
        public var url: String
        public var reason: Reason

        public init(url: String, reason: Reason) {
            self.url = url
            self.reason = reason
        }
    }

    /// Why a URL is not prefetched.
    public enum Reason: Error, Hashable, Sendable, CustomStringConvertible {
        /// The URL holds an expression `@{...}`, which only the device can resolve.
        case expression
        /// The route's `httpAdditionalData` asks for a method other than GET or sends a body; the proxy only
        /// prefetches (and caches) plain GETs.
        case notPlainGET
        /// An absolute URL on a host that is neither the upstream's origin nor an allowed host; the associated
        /// value is its host (with the port when that is not the scheme's default).
        case foreignHost(String)
        /// An absolute URL on the upstream's origin outside the upstream's base path.
        case outsideBasePath
        /// Not a path starting with `/` and not an absolute `http` or `https` URL (an empty string, a bare name
        /// like `absolutePath`, a `beagle://` or other scheme, a URL with user information).
        case unsupportedURL
        /// A path that does not build into a valid request target.
        case invalidTarget

        public var description: String {
            switch self {
            case .expression: "the URL holds an expression the device resolves"
            case .notPlainGET: "the route asks for a request other than a plain GET"
            case .foreignHost(let host): "\(host) is neither the upstream nor an allowed host"
            case .outsideBasePath: "the URL is outside the upstream's base path"
            case .unsupportedURL: "the URL is neither a path starting with / nor an http(s) URL"
            case .invalidTarget: "the URL is not a valid request target"
            }
        }
    }

    /// The backend the proxy fronts.
    public let upstream: UpstreamOrigin
    /// The upstream's base path normalised like a request target (`/bff`), or nil for a directory upstream or
    /// an upstream at the root.
    private let basePath: String?
    private let allowedHosts: [HostPattern]
    /// This planner's, and its copies': what tells the URLs it resolved from those another configuration's planner
    /// resolved (``ResolvedPrefetchURLs``). Sound because what the planner holds is all `let`, set when it is made.
    let identity = Identity()

    /// A planner's identity: compared by reference.
    final class Identity: Sendable {}

    /// - Parameters:
    ///   - upstream: the backend; relative URLs and URLs on its origin resolve against it.
    ///   - allowedHosts: other public names of this proxy or its backend, as `host` (any port) or `host:port`
    ///     (`[v6address]:port` for IPv6), compared without regard to case. Entries of another shape (a URL
    ///     with a scheme, an empty string) never match.
    public init(upstream: UpstreamOrigin, allowedHosts: [String]) {
        self.upstream = upstream
        if case .http(let origin) = upstream, !origin.basePath.isEmpty {
            let normalised = (try? RequestTarget(parsing: origin.basePath).path) ?? origin.basePath
            self.basePath = normalised == "/" ? nil : normalised
        } else {
            self.basePath = nil
        }
        self.allowedHosts = allowedHosts.compactMap(HostPattern.init(parsing:))
    }

    /// The prefetch plan for a component as the backend sent it: one pass over its bytes, at any depth (up to
    /// ``maximumDepth``), arrays included, without building the component's tree. A body that is not valid
    /// JSON has no plan.
    public func plan(forComponent body: ByteBuffer) -> Plan {
        body.withUnsafeReadableBytes { plan(forComponent: $0) }
    }

    /// The prefetch plan for a component's bytes; see ``plan(forComponent:)-(ByteBuffer)``.
    public func plan(forComponent bytes: UnsafeRawBufferPointer) -> Plan {
        guard let scan = try? Self.scan(bytes) else { return Plan() }
        return plan(for: scan, in: bytes)
    }

    /// The one pass over a component's bytes: it validates them as JSON, checks the root for `rootMember`, and
    /// keeps the members of actions.
    static func scan(
        _ bytes: UnsafeRawBufferPointer,
        rootMember: String = ""
    ) throws(JSONParser.Failure)
        -> JSONParser.Scan
    {
        var storage = JSONScanStorage()
        return try scan(bytes, rootMember: rootMember, storage: &storage)
    }

    /// ``scan(_:rootMember:)`` into the arrays `storage` lends (``JSONScanStorage``).
    static func scan(
        _ bytes: UnsafeRawBufferPointer,
        rootMember: String = "",
        storage: inout JSONScanStorage
    ) throws(JSONParser.Failure)
        -> JSONParser.Scan
    {
        try JSONParser.scanObjects(
            bytes,
            keeping: keptKeys,
            reporting: actionKey,
            maximumDepth: maximumDepth,
            maximumCount: maximumActions,
            rootMember: rootMember,
            storage: &storage
        )
    }

    /// The plan for the actions a scan of `bytes` found.
    func plan(for scan: JSONParser.Scan, in bytes: UnsafeRawBufferPointer) -> Plan {
        var resolved = ResolvedPrefetchURLs()
        return plan(for: scan, in: bytes, resolved: &resolved)
    }

    /// ``plan(for:in:)``, taking the outcome of a URL `resolved` keeps from there, and keeping there those it
    /// resolves.
    func plan(
        for scan: JSONParser.Scan,
        in bytes: UnsafeRawBufferPointer,
        resolved: inout ResolvedPrefetchURLs
    ) -> Plan {
        var walk = Walk()
        walk.plan.truncated = scan.truncated
        // Room for every action to be a target, so the list is allocated once.
        if !scan.objects.isEmpty { walk.plan.targets.reserveCapacity(min(scan.objects.count, Self.maximumTargets)) }
        for action in scan.objects {
            guard !walk.finished else { break }
            guard let (url, route) = Self.prefetchableURL(action.members, in: scan, bytes: bytes) else { continue }
            guard Self.isPlainGET(route, in: scan, bytes: bytes) else {
                record(url: JSONParser.text(of: url, in: bytes), outcome: .failure(.notPlainGET), walk: &walk)
                continue
            }
            // Looked for by its bytes where the document spells it: a URL kept needs no string made of it.
            let spelled = UnsafeRawBufferPointer(rebasing: bytes[url.range])
            if !url.hasEscapes, let known = resolved.resolved(spelled, by: identity) {
                record(url: known.url, outcome: known.outcome, walk: &walk)
                continue
            }
            let text = JSONParser.text(of: url, in: bytes)
            let outcome = resolve(text)
            if !url.hasEscapes { resolved.keep(spelled, url: text, outcome: outcome, by: identity) }
            record(url: text, outcome: outcome, walk: &walk)
        }
        return walk.plan
    }

    /// Resolves a URL from a component or from the prefetch endpoint to a normalised request target on this
    /// proxy, or says why it cannot be prefetched.
    public func resolve(_ url: String) -> Result<String, Reason> {
        if Self.containsExpression(url) { return .failure(.expression) }
        let startsWithSlash = url.utf8.first == UInt8(ascii: "/")
        guard let built = BeagleURLBuilder.build(base: nil, path: url) else {
            return .failure(startsWithSlash ? .invalidTarget : .unsupportedURL)
        }
        if startsWithSlash { return Self.target(built) }

        guard let absolute = AbsoluteURL(parsing: built) else { return .failure(.unsupportedURL) }
        let pathAndQuery = absolute.path + (absolute.query.map { "?" + $0 } ?? "")
        if case .http(let origin) = upstream, origin.scheme == absolute.scheme,
            origin.host.lowercased() == absolute.host, origin.port == absolute.port
        {
            return targetUnderBasePath(pathAndQuery)
        }
        if allowedHosts.contains(where: { $0.matches(host: absolute.host, port: absolute.port) }) {
            return Self.target(pathAndQuery)
        }
        return .failure(.foreignHost(Self.hostDescription(absolute)))
    }

    // MARK: - Recording

    /// What planning has found so far. Repeated targets and skipped URLs are looked for in the plan's own lists,
    /// which hold at most 64 entries each: a set beside each list cost every planned component allocations of
    /// its own.
    private struct Walk {
        var plan = Plan()
        /// Set when the target limit is reached and another target appears: nothing more is recorded.
        var finished = false
    }

    private func record(url: String, outcome: Result<String, Reason>, walk: inout Walk) {
        switch outcome {
        case .success(let target):
            guard !walk.plan.targets.contains(target) else { return }
            guard walk.plan.targets.count < Self.maximumTargets else {
                walk.plan.truncated = true
                walk.finished = true
                return
            }
            walk.plan.targets.append(target)
        case .failure(let reason):
            let skipped = Skipped(url: url, reason: reason)
            guard !walk.plan.skipped.contains(skipped) else { return }
            guard walk.plan.skipped.count < Self.maximumSkipped else {
                walk.plan.truncated = true
                return
            }
            walk.plan.skipped.append(skipped)
        }
    }

    /// The `route.url` of a navigation action with `route.shouldPrefetch == true`, where it lies in the document,
    /// and the route's members; nil for anything else. Names are compared where they lie in the document.
    private static func prefetchableURL(
        _ action: Range<Int>,
        in scan: JSONParser.Scan,
        bytes: UnsafeRawBufferPointer
    ) -> (url: JSONParser.StringSpan, route: Range<Int>)? {
        guard case .string(let name)? = scan.value(of: Key.action.rawValue, in: action),
            navigationActionSpellings.contains(where: { JSONParser.spells(name, in: bytes, ignoringCase: $0) }),
            case .object(let route)? = scan.value(of: Key.route.rawValue, in: action),
            case .bool(true)? = scan.value(of: Key.shouldPrefetch.rawValue, in: route),
            case .string(let url)? = scan.value(of: Key.url.rawValue, in: route)
        else { return nil }
        return (url, route)
    }

    /// Whether the route's `httpAdditionalData` (if it is an object) leaves the request a GET without a body.
    private static func isPlainGET(
        _ route: Range<Int>,
        in scan: JSONParser.Scan,
        bytes: UnsafeRawBufferPointer
    )
        -> Bool
    {
        guard case .object(let additional)? = scan.value(of: Key.httpAdditionalData.rawValue, in: route) else {
            return true
        }
        switch scan.value(of: Key.method.rawValue, in: additional) {
        case nil, .null?: break
        case .string(let method)?: guard JSONParser.spells(method, in: bytes, ignoringCase: "get") else { return false }
        default: return false
        }
        switch scan.value(of: Key.body.rawValue, in: additional) {
        case nil, .null?: return true
        default: return false
        }
    }

    // MARK: - Resolving

    private static func containsExpression(_ url: String) -> Bool {
        // `@` is rare in a URL: `memchr` finds it, or its absence, where a loop over every byte cost each declared
        // URL about 170 instructions.
        url.withContiguousUTF8 { text in
            let bytes = UnsafeRawBufferPointer(text)
            var from = 0
            while let at = ByteSearch.firstIndex(of: UInt8(ascii: "@"), in: bytes, from: from) {
                if at + 1 < bytes.count, bytes[at + 1] == UInt8(ascii: "{") { return true }
                from = at + 1
            }
            return false
        }
    }

    private static func target(_ text: String) -> Result<String, Reason> {
        guard let target = try? RequestTarget(parsing: text) else { return .failure(.invalidTarget) }
        return .success(target.description)
    }

    /// The target for a URL path on the upstream's origin: the part after the base path.
    private func targetUnderBasePath(_ pathAndQuery: String) -> Result<String, Reason> {
        guard let target = try? RequestTarget(parsing: pathAndQuery) else { return .failure(.invalidTarget) }
        guard let basePath else { return .success(target.description) }
        let path = target.path
        let remainder: Substring
        if path == basePath {
            remainder = "/"
        } else if path.hasPrefix(basePath), path.dropFirst(basePath.count).hasPrefix("/") {
            remainder = path.dropFirst(basePath.count)
        } else {
            return .failure(.outsideBasePath)
        }
        return .success(String(remainder) + (target.query.map { "?" + $0 } ?? ""))
    }

    private static func hostDescription(_ url: AbsoluteURL) -> String {
        let host = url.host.contains(":" as Character) ? "[\(url.host)]" : url.host
        let defaultPort = url.scheme == "https" ? 443 : 80
        return url.port == defaultPort ? host : "\(host):\(url.port)"
    }
}

/// An `allowedHosts` entry: a lower-cased host and, when the entry names one, a port.
private struct HostPattern: Sendable {
    var host: String
    var port: Int?

    init?(parsing entry: String) {
        let text = entry.lowercased()
        guard !text.isEmpty, !text.contains("/" as Character), !text.contains("@" as Character) else { return nil }
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let after = text[text.index(after: close)...]
            host = String(text[text.index(after: text.startIndex)..<close])
            if after.isEmpty {
                port = nil
            } else if after.hasPrefix(":"), let parsed = Int(after.dropFirst()), (1...65535).contains(parsed) {
                port = parsed
            } else {
                return nil
            }
        } else if let colon = text.firstIndex(of: ":") {
            if text[text.index(after: colon)...].contains(":" as Character) {
                // A bare IPv6 address.
                host = text
                port = nil
            } else {
                guard let parsed = Int(text[text.index(after: colon)...]), (1...65535).contains(parsed) else {
                    return nil
                }
                host = String(text[..<colon])
                port = parsed
            }
        } else {
            host = text
            port = nil
        }
        guard !host.isEmpty else { return nil }
    }

    func matches(host: String, port: Int) -> Bool {
        self.host == host && (self.port == nil || self.port == port)
    }
}
