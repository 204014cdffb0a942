import Yams

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Values given on the command line; they win over the file and the environment.
public struct CommandLineOverrides: Sendable, Equatable {
    public var port: Int?
    public var adminPort: Int?
    public var upstream: String?

    public init(port: Int? = nil, adminPort: Int? = nil, upstream: String? = nil) {
        self.port = port
        self.adminPort = adminPort
        self.upstream = upstream
    }
}

/// Builds a ``ProxyConfiguration`` from YAML text, the environment and command-line overrides, and rejects
/// anything it does not understand with a ``ConfigurationError`` that names the key.
public struct ConfigurationLoader: Sendable {
    /// Environment variables that start with the prefix but are not config keys.
    public static let nonConfigurationVariables: Set<String> = ["SDUI_PROXY_ADMIN_TOKEN"]

    public var environment: [String: String]

    public init(environment: [String: String] = [:]) {
        self.environment = environment
    }

    /// Reads and validates the file at `path`.
    public func load(
        path: String,
        overrides: CommandLineOverrides = .init()
    ) throws(ConfigurationError) -> ProxyConfiguration {
        let absolutePath = Self.absolute(path)
        guard let text = Self.readFile(path) else {
            throw ConfigurationError(key: absolutePath, problem: "cannot read the config file (missing or unreadable)")
        }
        do {
            return try load(yaml: text, overrides: overrides)
        } catch let error where error.key == Self.wholeFileKey {
            // The file as a whole is the problem (its YAML): name it, where a key would be named.
            throw ConfigurationError(key: absolutePath, problem: error.problem)
        }
    }

    /// The key of an error about the text as a whole, which ``load(path:overrides:)`` replaces with the file's path.
    static let wholeFileKey = "(file)"

    /// Validates `yaml` with the environment and `overrides` laid over it.
    public func load(
        yaml: String,
        overrides: CommandLineOverrides = .init()
    ) throws(ConfigurationError) -> ProxyConfiguration {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            let oneLine = "\(error)".split(whereSeparator: \.isNewline).joined(separator: " ")
            throw ConfigurationError(key: Self.wholeFileKey, problem: "not valid YAML: \(oneLine)")
        }
        let log = ConfigurationSection.VariableLog()
        let top = try ConfigurationSection(path: [], node: root, environment: environment, log: log)
        try top.rejectUnknownKeys([
            "listen", "admin", "upstream", "platform", "headers", "cache", "prefetch", "log", "compat", "queue",
            "limits", "eventLoops", "cluster", "compression", "metrics", "tracing",
        ])

        var config = ProxyConfiguration()
        let listen = try top.section("listen")
        config.listen = try Self.address(
            listen,
            default: config.listen,
            otherKeys: ["trustedProxies"] + ListenerProtocols.keys
        )
        config.trustedProxies = try listen.stringList("trustedProxies", default: []).map {
            (text) throws(ConfigurationError) in
            guard let range = IPAddressRange(text) else {
                throw listen.fail("trustedProxies", "\"\(text)\" is not an IP address or CIDR block like 10.0.0.0/8")
            }
            return range
        }
        config.listenProtocols = try ListenerProtocols.parse(listen)
        let admin = try top.section("admin")
        config.admin = try Self.address(admin, default: config.admin, otherKeys: ["probesOpen"])
        config.adminProbesOpen = try admin.bool("probesOpen", default: config.adminProbesOpen)
        let upstreamSection = try top.section("upstream")
        config.upstream = try Self.upstream(upstreamSection)
        let upstreamNamed = try upstreamSection.names("url")
        config.platform = try Self.platform(top.section("platform"))
        if let pairs = try top.orderedPairs("headers") {
            for (name, value) in pairs {
                guard HTTPSyntax.isToken(name) else { throw top.fail("headers", "\"\(name)\" is not a header name") }
                guard HTTPSyntax.isFieldValue(value) else {
                    throw top.fail("headers", "the value of \(name) has characters a header cannot carry")
                }
                // Added to the defaults: a name given again replaces the default, and an empty value removes it.
                config.headers.removeAll { $0.name.lowercased() == name.lowercased() }
                if !value.isEmpty { config.headers.append((name: name, value: value)) }
            }
        }
        config.cache = try Self.cache(top.section("cache"))
        config.prefetch = try Self.prefetch(top.section("prefetch"), allowedPlatforms: config.platform.allowed)
        config.log = try Self.log(top.section("log"))
        let compat = try top.section("compat")
        try compat.rejectUnknownKeys(["beagleHash"])
        config.compat.beagleHash = try compat.bool("beagleHash", default: false)
        config.limits = try Self.limits(top.section("limits"))
        config.eventLoops = try Self.eventLoops(top.section("eventLoops"))
        if top.mapping["queue"] != nil || environment.keys.contains(where: { $0.hasPrefix("SDUI_PROXY_QUEUE_") }) {
            config.queue = try QueueConfiguration.parse(top.section("queue"))
        }

        config.cluster = try ClusterConfiguration.parse(top.section("cluster"))
        config.compression = try CompressionConfiguration.parse(top.section("compression"))
        config.metrics = try MetricsConfiguration.parse(top.section("metrics"))
        config.tracing = try TracingConfiguration.parse(top.section("tracing"))

        if let port = overrides.port { config.listen.port = try Self.checkedPort(port, key: "--port") }
        if let port = overrides.adminPort { config.admin.port = try Self.checkedPort(port, key: "--admin-port") }
        if let upstream = overrides.upstream {
            try Self.checkUpstreamURL(upstream, key: "--upstream")
            config.upstream.url = upstream
        }
        // No backend named means no backend: the sample screens are the bundled config's, never a fallback that a
        // deployment whose working directory holds them would serve instead of failing.
        guard upstreamNamed || overrides.upstream != nil else {
            throw ConfigurationError(
                key: "upstream.url",
                problem: """
                    is not set: name the component backend (http://host:port/base, or file:DIRECTORY for a \
                    directory of screens) in the config file, in SDUI_PROXY_UPSTREAM_URL or with --upstream
                    """
            )
        }
        // Declared URLs are checked against the upstream they will be fetched from (the flags' included): one
        // that can never be fetched would otherwise fail, and be retried, for as long as the proxy runs.
        if let upstream = try? UpstreamOrigin(parsing: config.upstream.url) {
            let planner = PrefetchPlanner(upstream: upstream, allowedHosts: config.prefetch.allowedHosts)
            for url in config.prefetch.urls {
                if case .failure(let reason) = planner.resolve(url) {
                    throw ConfigurationError(key: "prefetch.urls", problem: "\(url) cannot be prefetched: \(reason)")
                }
            }
        }
        if config.listen.port != 0, config.listen.port == config.admin.port,
            config.listen.host == config.admin.host
                || [config.listen.host, config.admin.host].contains(where: Self.isWildcard)
        {
            throw ConfigurationError(key: "admin.port", problem: "the admin listener cannot share the public address")
        }

        let unknownVariables = environment.keys.filter {
            $0.hasPrefix("SDUI_PROXY_") && !log.names.contains($0) && !Self.nonConfigurationVariables.contains($0)
        }
        if let unknown = unknownVariables.sorted().first {
            throw ConfigurationError(
                key: unknown,
                problem: "unknown environment variable (no config key has that name)"
            )
        }
        return config
    }

    // MARK: Sections

    private static func address(
        _ section: ConfigurationSection,
        default fallback: ProxyConfiguration.ListenAddress,
        otherKeys: [String] = []
    ) throws(ConfigurationError) -> ProxyConfiguration.ListenAddress {
        try section.rejectUnknownKeys(Set(["host", "port"] + otherKeys))
        let host = try section.string("host", default: fallback.host)
        guard !host.isEmpty else { throw section.fail("host", "must not be empty") }
        return .init(host: host, port: try section.int("port", default: fallback.port, in: 0...65535))
    }

    private static func upstream(
        _ section: ConfigurationSection
    ) throws(ConfigurationError) -> ProxyConfiguration.Upstream {
        try section.rejectUnknownKeys([
            "url", "timeout", "bodyIdleTimeout", "connectTimeout", "maxConnections", "maxForwardConnections",
            "maxResponseBytes", "maxBufferedBytes", "caFile",
        ])
        var upstream = ProxyConfiguration.Upstream()
        upstream.url = try section.string("url", default: upstream.url)
        try checkUpstreamURL(upstream.url, key: section.keyPath("url"))
        upstream.timeout = try section.duration("timeout", default: upstream.timeout)
        guard upstream.timeout > .zero else { throw section.fail("timeout", "must be more than 0") }
        upstream.bodyIdleTimeout = try section.duration("bodyIdleTimeout", default: upstream.bodyIdleTimeout)
        guard upstream.bodyIdleTimeout > .zero else { throw section.fail("bodyIdleTimeout", "must be more than 0") }
        upstream.connectTimeout = try section.duration("connectTimeout", default: upstream.connectTimeout)
        guard upstream.connectTimeout > .zero else { throw section.fail("connectTimeout", "must be more than 0") }
        upstream.maxConnections = try section.int("maxConnections", default: upstream.maxConnections, in: 1...100_000)
        // Left out, it follows maxConnections (half of it), whatever sets that.
        if let forwards = try section.optionalInt("maxForwardConnections", in: 1...100_000) {
            guard forwards <= upstream.maxConnections else {
                throw section.fail(
                    "maxForwardConnections",
                    "must be at most upstream.maxConnections (\(upstream.maxConnections)): forwards take their connections from that pool"
                )
            }
            upstream.maxForwardConnections = forwards
        }
        // Checked against the URL in force (flags included) and read at start-up: StartupChecks.
        let caFile = try section.string("caFile", default: "")
        upstream.caFile = caFile.isEmpty ? nil : caFile
        upstream.maxResponseBytes = try section.byteSize(
            "maxResponseBytes",
            default: upstream.maxResponseBytes,
            minimum: 1
        )
        upstream.maxBufferedBytes = try section.byteSize(
            "maxBufferedBytes",
            default: max(upstream.maxBufferedBytes, upstream.maxResponseBytes),
            minimum: 1
        )
        guard upstream.maxBufferedBytes >= upstream.maxResponseBytes else {
            throw section.fail(
                "maxBufferedBytes",
                "must be at least upstream.maxResponseBytes (\(upstream.maxResponseBytes) bytes), or no response that size could be stored"
            )
        }
        return upstream
    }

    private static func platform(
        _ section: ConfigurationSection
    ) throws(ConfigurationError) -> ProxyConfiguration.Platform {
        try section.rejectUnknownKeys(["header", "default", "allowed"])
        var platform = ProxyConfiguration.Platform()
        platform.header = try section.string("header", default: platform.header)
        guard HTTPSyntax.isToken(platform.header) else { throw section.fail("header", "is not a header name") }
        platform.allowed = try section.stringList("allowed", default: platform.allowed).map { $0.uppercased() }
        for value in platform.allowed where !PlatformValue.isValid(value) {
            throw section.fail("allowed", "\"\(value)\" is not a platform name (letters, digits, - and _)")
        }
        let defaultValue = try section.string("default", default: platform.defaultValue).uppercased()
        guard PlatformValue.isValid(defaultValue) else {
            throw section.fail("default", "\"\(defaultValue)\" is not a platform name (letters, digits, - and _)")
        }
        guard platform.allowed.isEmpty || platform.allowed.contains(defaultValue) else {
            throw section.fail("default", "\(defaultValue) is not one of platform.allowed")
        }
        platform.defaultValue = defaultValue
        return platform
    }

    private static func cache(_ section: ConfigurationSection) throws(ConfigurationError) -> ProxyConfiguration.Cache {
        try section.rejectUnknownKeys([
            "maxBytes", "maxEntries", "defaultTTL", "validateComponents", "vary", "routes", "staleIfError", "tagHeader",
            "exposeTags",
            "targetedFields", "heuristic", "maxErrorTTL", "storeSetCookie", "honorClientNoCache", "name",
            "xCacheHeader",
            "cacheStatusKey", "rangeMiss", "maxPartsPerEntry",
        ])
        var cache = ProxyConfiguration.Cache()
        cache.maxBytes = try section.byteSize("maxBytes", default: cache.maxBytes, minimum: 1024)
        cache.maxEntries = try section.int("maxEntries", default: cache.maxEntries, in: 1...100_000_000)
        cache.policy = try routePolicy(section, inheriting: cache.policy)
        cache.tagHeader = try section.string("tagHeader", default: cache.tagHeader)
        guard HTTPSyntax.isToken(cache.tagHeader) else { throw section.fail("tagHeader", "is not a header name") }
        cache.exposeTags = try section.bool("exposeTags", default: cache.exposeTags)
        cache.storageRules = try storageRules(section)
        cache.honorClientNoCache = try section.bool("honorClientNoCache", default: cache.honorClientNoCache)
        cache.name = try section.string("name", default: cache.name)
        guard CacheStatus.isToken(cache.name) else {
            throw section.fail(
                "name",
                "\"\(cache.name)\" is not a token (a letter or *, then letters, digits and !#$%&'*+-.^_`|~:/)"
            )
        }
        cache.xCacheHeader = try section.bool("xCacheHeader", default: cache.xCacheHeader)
        cache.cacheStatusKey = try section.bool("cacheStatusKey", default: cache.cacheStatusKey)
        let rangeMiss = try section.string("rangeMiss", default: cache.rangeMiss.rawValue)
        guard let parsedRangeMiss = ProxyConfiguration.Cache.RangeMiss(rawValue: rangeMiss) else {
            throw section.fail("rangeMiss", "must be whole or part, not \"\(rangeMiss)\"")
        }
        cache.rangeMiss = parsedRangeMiss
        cache.maxPartsPerEntry = try section.int("maxPartsPerEntry", default: cache.maxPartsPerEntry, in: 1...1024)
        for routeSection in try section.sectionList("routes") {
            try routeSection.rejectUnknownKeys([
                "prefix", "defaultTTL", "validateComponents", "vary", "bypass", "staleIfError", "stream",
            ])
            let prefix = try routeSection.string("prefix", default: "")
            guard prefix.hasPrefix("/") else { throw routeSection.fail("prefix", "must be a path starting with /") }
            var policy = try routePolicy(routeSection, inheriting: cache.policy)
            policy.bypass = try routeSection.bool("bypass", default: false)
            policy.stream = try routeSection.bool("stream", default: false)
            // Only a forwarded request has a body to stream: a cached route's requests never reach the backend
            // with one.
            guard !policy.stream || policy.bypass else {
                throw routeSection.fail("stream", "streams request bodies only on a route with bypass: true")
            }
            cache.routes.append(.init(prefix: prefix, policy: policy))
        }
        return cache
    }

    private static func storageRules(_ section: ConfigurationSection) throws(ConfigurationError) -> StorageRules {
        var rules = StorageRules()
        rules.targetedFields = try section.stringList("targetedFields", default: rules.targetedFields).map {
            $0.lowercased()
        }
        for name in rules.targetedFields where !HTTPSyntax.isToken(name) {
            throw section.fail("targetedFields", "\"\(name)\" is not a header name")
        }
        let heuristic = try section.section("heuristic")
        try heuristic.rejectUnknownKeys(["fraction", "max"])
        rules.heuristicFraction = try heuristic.fraction("fraction", default: rules.heuristicFraction)
        rules.heuristicMaximum = try heuristic.duration("max", default: .seconds(rules.heuristicMaximum)).wholeSeconds
        rules.maxErrorLifetime = try section.optionalDuration("maxErrorTTL")?.wholeSeconds
        rules.storesSetCookie = try section.bool("storeSetCookie", default: rules.storesSetCookie)
        return rules
    }

    private static func routePolicy(
        _ section: ConfigurationSection,
        inheriting base: ProxyConfiguration.RoutePolicy
    ) throws(ConfigurationError) -> ProxyConfiguration.RoutePolicy {
        var policy = base
        policy.defaultTTL = try section.duration("defaultTTL", default: base.defaultTTL)
        policy.validateComponents = try section.bool("validateComponents", default: base.validateComponents)
        policy.staleIfError = try section.duration("staleIfError", default: base.staleIfError)
        policy.vary = try section.stringList("vary", default: base.vary).map { $0.lowercased() }
        for name in policy.vary where !HTTPSyntax.isToken(name) {
            throw section.fail("vary", "\"\(name)\" is not a header name")
        }
        return policy
    }

    private static func prefetch(
        _ section: ConfigurationSection,
        allowedPlatforms: [String]
    ) throws(ConfigurationError) -> ProxyConfiguration.Prefetch {
        try section.rejectUnknownKeys([
            "urls", "platforms", "followActions", "concurrency", "refresh", "allowedHosts", "maxURLsPerRequest",
            "maxRequestBytes", "readyWhen",
        ])
        var prefetch = ProxyConfiguration.Prefetch()
        prefetch.urls = try section.stringList("urls", default: prefetch.urls)
        for url in prefetch.urls where url.isEmpty {
            throw section.fail("urls", "an entry is empty")
        }
        prefetch.platforms = try section.stringList("platforms", default: prefetch.platforms).map { $0.uppercased() }
        for platform in prefetch.platforms
        where !PlatformValue.isValid(platform) || !(allowedPlatforms.isEmpty || allowedPlatforms.contains(platform)) {
            throw section.fail("platforms", "\(platform) is not an allowed platform")
        }
        prefetch.followActions = try section.int("followActions", default: prefetch.followActions, in: 0...10)
        prefetch.concurrency = try section.int("concurrency", default: prefetch.concurrency, in: 1...1024)
        prefetch.refresh = try section.bool("refresh", default: prefetch.refresh)
        let readyWhen = try section.string("readyWhen", default: prefetch.readyWhen.rawValue)
        guard let rule = ProxyConfiguration.ReadyWhen(rawValue: readyWhen) else {
            let names = ProxyConfiguration.ReadyWhen.allCases.map(\.rawValue).joined(separator: " or ")
            throw section.fail("readyWhen", "must be \(names), not \"\(readyWhen)\"")
        }
        prefetch.readyWhen = rule
        prefetch.allowedHosts = try section.stringList("allowedHosts", default: prefetch.allowedHosts)
        for host in prefetch.allowedHosts
        where host.isEmpty || host.contains("/" as Character) || host.contains(" " as Character) {
            throw section.fail("allowedHosts", "\"\(host)\" is not a host or host:port")
        }
        prefetch.maxURLsPerRequest = try section.int(
            "maxURLsPerRequest",
            default: prefetch.maxURLsPerRequest,
            in: 1...100_000
        )
        prefetch.maxRequestBytes = try section.byteSize(
            "maxRequestBytes",
            default: prefetch.maxRequestBytes,
            minimum: 64
        )
        // The admin listener reads no request body larger than this.
        guard prefetch.maxRequestBytes <= ProxyConfiguration.Prefetch.largestRequestBytes else {
            throw section.fail("maxRequestBytes", "must be at most 1MiB")
        }
        return prefetch
    }

    private static func limits(_ section: ConfigurationSection) throws(ConfigurationError) -> ProxyConfiguration.Limits
    {
        try section.rejectUnknownKeys([
            "maxHeaderBytes", "maxHeaderCount", "maxURLBytes", "maxBodyBytes", "requestTimeout", "idleTimeout",
            "maxConnections", "requestBufferBytes", "requestBufferDirectory",
        ])
        var limits = ProxyConfiguration.Limits()
        limits.maxHeaderBytes = try section.byteSize("maxHeaderBytes", default: limits.maxHeaderBytes, minimum: 256)
        limits.maxHeaderCount = try section.int("maxHeaderCount", default: limits.maxHeaderCount, in: 1...10_000)
        limits.maxURLBytes = try section.byteSize("maxURLBytes", default: limits.maxURLBytes, minimum: 16)
        limits.maxBodyBytes = try section.byteSize("maxBodyBytes", default: limits.maxBodyBytes, minimum: 0)
        limits.requestBufferBytes = try section.byteSize(
            "requestBufferBytes",
            default: limits.requestBufferBytes,
            minimum: 0
        )
        // Checked for being a writable directory at start-up (StartupChecks), where the process's view counts.
        let bufferDirectory = try section.string("requestBufferDirectory", default: "")
        limits.requestBufferDirectory = bufferDirectory.isEmpty ? nil : bufferDirectory
        limits.requestTimeout = try section.duration("requestTimeout", default: limits.requestTimeout)
        guard limits.requestTimeout > .zero else { throw section.fail("requestTimeout", "must be more than 0") }
        limits.idleTimeout = try section.duration("idleTimeout", default: limits.idleTimeout)
        guard limits.idleTimeout > .zero else { throw section.fail("idleTimeout", "must be more than 0") }
        limits.maxConnections = try section.int("maxConnections", default: limits.maxConnections, in: 1...1_000_000)
        return limits
    }

    private static func eventLoops(
        _ section: ConfigurationSection
    ) throws(ConfigurationError) -> ProxyConfiguration.EventLoops {
        try section.rejectUnknownKeys(["count", "yieldAfter"])
        var eventLoops = ProxyConfiguration.EventLoops()
        eventLoops.count = try section.int("count", default: eventLoops.count, in: 0...1024)
        eventLoops.yieldAfter = try section.duration("yieldAfter", default: eventLoops.yieldAfter)
        // Under 50us a loop would spend more on yielding than on requests; over 100ms it never would.
        guard
            eventLoops.yieldAfter == .zero || (.microseconds(50)...(.milliseconds(100))).contains(eventLoops.yieldAfter)
        else { throw section.fail("yieldAfter", "must be 0 (never) or from 50us to 100ms") }
        return eventLoops
    }

    private static func log(_ section: ConfigurationSection) throws(ConfigurationError) -> ProxyConfiguration.Log {
        try section.rejectUnknownKeys(["level", "format", "access"])
        var log = ProxyConfiguration.Log()
        log.level = try section.string("level", default: log.level).lowercased()
        let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
        guard levels.contains(log.level) else {
            throw section.fail("level", "must be one of \(levels.joined(separator: ", "))")
        }
        log.format = try section.string("format", default: log.format).lowercased()
        guard ["text", "json"].contains(log.format) else { throw section.fail("format", "must be text or json") }
        log.access = try section.bool("access", default: log.access)
        return log
    }

    // MARK: Checks

    private static func isWildcard(_ host: String) -> Bool {
        host == "0.0.0.0" || host == "::" || host == "[::]"
    }

    private static func checkedPort(_ port: Int, key: String) throws(ConfigurationError) -> Int {
        guard (0...65535).contains(port) else {
            throw ConfigurationError(key: key, problem: "\(port) is out of range 0...65535")
        }
        return port
    }

    private static func checkUpstreamURL(_ url: String, key: String) throws(ConfigurationError) {
        do {
            _ = try UpstreamOrigin(parsing: url)
        } catch {
            throw ConfigurationError(key: key, problem: error.message)
        }
    }

    /// `path` from the root: relative paths are taken from the working directory.
    static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/"), let directory = getcwd(nil, 0) else { return path }
        defer { free(directory) }
        var base = String(cString: directory)
        if !base.hasSuffix("/") { base += "/" }
        return base + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    private static func readFile(_ path: String) -> String? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count > 0 { bytes.append(contentsOf: chunk[0..<count]) }
            if count < chunk.count {
                if ferror(file) != 0 { return nil }
                break
            }
            if bytes.count > 16 << 20 { return nil }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
