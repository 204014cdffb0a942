/// Writes a ``ProxyConfiguration`` as config-file YAML: every key, with the values in force, in the units the
/// file takes. ``ConfigurationLoader`` reads the text back to the same configuration, secrets aside.
///
/// Secrets are not printed: the admin token (which never comes from the file) appears only as `<redacted>`
/// when set, credentials in a URL (`https://user:pass@host`) become `<redacted>@host`, and so do the values
/// of `Authorization` and `Proxy-Authorization` headers. A PostgreSQL URL (`cluster.postgres`, `queue.store`)
/// keeps its user name: `postgres://user:<redacted>@host/database`.
public enum ConfigurationPrinter {
    /// What stands in for a secret.
    public static let redacted = "<redacted>"

    /// Header names whose values are credentials.
    static let credentialHeaders: Set<String> = ["authorization", "proxy-authorization"]

    /// The YAML text of `configuration`.
    ///
    /// - Parameter adminTokenIsSet: whether `SDUI_PROXY_ADMIN_TOKEN` is set; said in a comment, without the token.
    public static func yaml(_ configuration: ProxyConfiguration, adminTokenIsSet: Bool) -> String {
        var out = Writer()
        out.comment("The configuration in force: the config file, then SDUI_PROXY_* variables, then flags.")
        out.comment("SDUI_PROXY_ADMIN_TOKEN: \(adminTokenIsSet ? redacted : "not set")")
        let config = configuration
        out.line("listen:")
        out.pair(1, "host", scalar(config.listen.host))
        out.pair(1, "port", "\(config.listen.port)")
        out.pair(1, "trustedProxies", list(config.trustedProxies.map(\.description)))
        let protocols = config.listenProtocols
        // Printed only when set: without it the listener is clear text.
        if let tls = protocols.tls {
            out.line(
                "  tls: { certificate: \(scalar(tls.certificate, flow: true)), "
                    + "privateKey: \(scalar(tls.privateKey, flow: true)), "
                    + "minimumVersion: \(scalar(tls.minimumVersion.rawValue, flow: true)) }"
            )
        }
        out.pair(1, "http2", "\(protocols.http2)")
        out.line(
            "  http2Limits: { maxConcurrentStreams: \(protocols.maxConcurrentStreams), "
                + "maxHeaderListBytes: \(size(protocols.maxHeaderListBytes)) }"
        )
        out.line(
            "admin: { host: \(scalar(config.admin.host, flow: true)), port: \(config.admin.port), "
                + "probesOpen: \(config.adminProbesOpen) }"
        )

        out.line("upstream:")
        out.pair(1, "url", scalar(config.upstream.url))
        out.pair(1, "timeout", duration(config.upstream.timeout))
        out.pair(1, "bodyIdleTimeout", duration(config.upstream.bodyIdleTimeout))
        out.pair(1, "connectTimeout", duration(config.upstream.connectTimeout))
        out.pair(1, "maxConnections", "\(config.upstream.maxConnections)")
        // Printed only when set: left out, it follows maxConnections.
        if let forwards = config.upstream.maxForwardConnections { out.pair(1, "maxForwardConnections", "\(forwards)") }
        out.pair(1, "maxResponseBytes", size(config.upstream.maxResponseBytes))
        out.pair(1, "maxBufferedBytes", size(config.upstream.maxBufferedBytes))
        if let caFile = config.upstream.caFile { out.pair(1, "caFile", scalar(caFile)) }

        out.line("platform:")
        out.pair(1, "header", scalar(config.platform.header))
        out.pair(1, "default", scalar(config.platform.defaultValue))
        out.pair(1, "allowed", list(config.platform.allowed))

        // Configured headers add to the defaults: a default left out is printed with an empty value, which is
        // how a file removes it.
        let removedDefaults = ProxyConfiguration.defaultHeaders.filter { header in
            !config.headers.contains { $0.name.lowercased() == header.name.lowercased() }
        }
        if config.headers.isEmpty, removedDefaults.isEmpty {
            out.line("headers: {}")
        } else {
            out.line("headers:")
            for header in removedDefaults { out.pair(1, scalar(header.name), scalar("")) }
            for header in config.headers {
                let value = credentialHeaders.contains(header.name.lowercased()) ? redacted : header.value
                out.pair(1, scalar(header.name), scalar(value))
            }
        }

        out.line("cache:")
        out.pair(1, "maxBytes", size(config.cache.maxBytes))
        out.pair(1, "maxEntries", "\(config.cache.maxEntries)")
        out.pair(1, "tagHeader", scalar(config.cache.tagHeader))
        out.pair(1, "exposeTags", "\(config.cache.exposeTags)")
        let rules = config.cache.storageRules
        out.pair(1, "targetedFields", list(rules.targetedFields))
        out.line(
            "  heuristic: { fraction: \(rules.heuristicFraction), max: \(duration(.seconds(rules.heuristicMaximum))) }"
        )
        if let maximum = rules.maxErrorLifetime { out.pair(1, "maxErrorTTL", duration(.seconds(maximum))) }
        out.pair(1, "storeSetCookie", "\(rules.storesSetCookie)")
        out.pair(1, "honorClientNoCache", "\(config.cache.honorClientNoCache)")
        out.pair(1, "name", scalar(config.cache.name))
        out.pair(1, "xCacheHeader", "\(config.cache.xCacheHeader)")
        out.pair(1, "cacheStatusKey", "\(config.cache.cacheStatusKey)")
        out.pair(1, "rangeMiss", config.cache.rangeMiss.rawValue)
        out.pair(1, "maxPartsPerEntry", "\(config.cache.maxPartsPerEntry)")
        policy(config.cache.policy, indent: 1, into: &out)
        if config.cache.routes.isEmpty {
            out.pair(1, "routes", "[]")
        } else {
            out.pair(1, "routes", "")
            for route in config.cache.routes {
                out.item(2, "prefix", scalar(route.prefix))
                policy(route.policy, indent: 3, into: &out)
                out.pair(3, "bypass", "\(route.policy.bypass)")
                if route.policy.bypass { out.pair(3, "stream", "\(route.policy.stream)") }
            }
        }

        let prefetch = config.prefetch
        out.line("prefetch:")
        out.pair(1, "urls", list(prefetch.urls))
        out.pair(1, "platforms", list(prefetch.platforms))
        out.pair(1, "followActions", "\(prefetch.followActions)")
        out.pair(1, "concurrency", "\(prefetch.concurrency)")
        out.pair(1, "refresh", "\(prefetch.refresh)")
        out.pair(1, "readyWhen", prefetch.readyWhen.rawValue)
        out.pair(1, "allowedHosts", list(prefetch.allowedHosts))
        out.pair(1, "maxURLsPerRequest", "\(prefetch.maxURLsPerRequest)")
        out.pair(1, "maxRequestBytes", size(prefetch.maxRequestBytes))

        let limits = config.limits
        out.line("limits:")
        out.pair(1, "maxHeaderBytes", size(limits.maxHeaderBytes))
        out.pair(1, "maxHeaderCount", "\(limits.maxHeaderCount)")
        out.pair(1, "maxURLBytes", size(limits.maxURLBytes))
        out.pair(1, "maxBodyBytes", size(limits.maxBodyBytes))
        out.pair(1, "requestTimeout", duration(limits.requestTimeout))
        out.pair(1, "idleTimeout", duration(limits.idleTimeout))
        out.pair(1, "maxConnections", "\(limits.maxConnections)")
        out.pair(1, "requestBufferBytes", size(limits.requestBufferBytes))
        if let directory = limits.requestBufferDirectory { out.pair(1, "requestBufferDirectory", scalar(directory)) }

        out.line(
            "eventLoops: { count: \(config.eventLoops.count), yieldAfter: \(duration(config.eventLoops.yieldAfter)) }"
        )
        out.line("compat: { beagleHash: \(config.compat.beagleHash) }")
        out.line(
            "log: { level: \(scalar(config.log.level, flow: true)), format: \(scalar(config.log.format, flow: true)), "
                + "access: \(config.log.access) }"
        )
        let compression = config.compression
        out.line("compression:")
        out.pair(1, "encodings", list(compression.encodings.map(\.rawValue)))
        out.pair(1, "minBytes", size(compression.minBytes))
        out.pair(1, "types", list(compression.types))
        out.line("  level: { gzip: \(compression.gzipLevel), br: \(compression.brotliLevel) }")
        out.pair(1, "eager", "\(compression.eager)")
        out.line("metrics:")
        out.pair(1, "routes", list(config.metrics.routes))
        let tracing = config.tracing
        out.line("tracing:")
        out.line(
            "  otlp: { endpoint: \(scalar(tracing.endpoint ?? "", flow: true)), "
                + "protocol: \(scalar(tracing.otlpProtocol.rawValue, flow: true)) }"
        )
        out.pair(1, "sampleRatio", "\(tracing.sampleRatio)")
        out.pair(1, "serviceName", scalar(tracing.serviceName))
        out.line("cluster:")
        out.pair(1, "postgres", config.cluster.postgres.map { quoted($0.description) } ?? scalar(""))
        out.pair(1, "replicaName", scalar(config.cluster.replicaName))
        if let queue = config.queue { self.queue(queue, into: &out) }
        return out.text
    }

    // MARK: Sections

    private static func policy(_ policy: ProxyConfiguration.RoutePolicy, indent: Int, into out: inout Writer) {
        out.pair(indent, "defaultTTL", duration(policy.defaultTTL))
        out.pair(indent, "staleIfError", duration(policy.staleIfError))
        out.pair(indent, "validateComponents", "\(policy.validateComponents)")
        out.pair(indent, "vary", list(policy.vary))
    }

    private static func queue(_ queue: QueueConfiguration, into out: inout Writer) {
        out.line("queue:")
        if case .postgres(let url)? = try? queue.storeLocation {
            out.pair(1, "store", quoted(url.description))
        } else {
            out.pair(1, "store", scalar(queue.store))
        }
        out.pair(1, "leaseTimeout", duration(queue.leaseTimeout))
        out.pair(1, "maxDepth", "\(queue.maxDepth)")
        out.pair(1, "maxBodyBytes", size(queue.maxBodyBytes))
        out.pair(
            1,
            "retryableStatuses",
            "[" + queue.retryableStatuses.sorted().map(String.init).joined(separator: ", ") + "]"
        )
        out.pair(1, "concurrency", "\(queue.concurrency)")
        out.pair(1, "retention", duration(queue.retention))
        if queue.routes.isEmpty {
            out.pair(1, "routes", "[]")
        } else {
            out.pair(1, "routes", "")
            for route in queue.routes {
                let retry = route.retry
                out.item(2, "match", scalar(route.key))
                out.pair(3, "ordering", route.ordering.rawValue)
                out.pair(
                    3,
                    "retry",
                    "{ maxAttempts: \(retry.maxAttempts), backoff: \(duration(retry.backoff)), "
                        + "maxBackoff: \(duration(retry.maxBackoff)), maxAge: \(duration(retry.maxAge)) }"
                )
                if let creates = route.creates {
                    out.pair(
                        3,
                        "creates",
                        "{ localId: \(source(creates.localId)), remoteId: \(source(creates.remoteId)) }"
                    )
                }
            }
        }
        if queue.handlers.isEmpty {
            out.pair(1, "handlers", "[]")
        } else {
            out.pair(1, "handlers", "")
            for handler in queue.handlers {
                let outcomes = QueueConfiguration.Outcome.allCases.filter(handler.outcomes.contains).map(\.rawValue)
                out.item(2, "on", "[" + outcomes.joined(separator: ", ") + "]")
                if let route = handler.route { out.pair(3, "match", scalar(route)) }
                switch handler.action {
                case .invalidatePrefix(let prefix): out.pair(3, "invalidatePrefix", scalar(prefix))
                case .invalidateTag(let tag): out.pair(3, "invalidateTag", scalar(tag))
                case .webhook(let url): out.pair(3, "webhook", scalar(url))
                }
            }
        }
    }

    // MARK: Values

    /// Where a create rule reads an identifier, as the config file says it.
    private static func source(_ source: CreateRule.Source) -> String {
        switch source {
        case .header(let name): "{ header: \(scalar(name, flow: true)) }"
        case .json(let pointer): "{ json: \(scalar(pointer.description, flow: true)) }"
        case .headerPattern(let name, let pattern):
            "{ header: \(scalar(name, flow: true)), pattern: \(scalar(pattern, flow: true)) }"
        }
    }

    /// A duration in the largest unit that holds it whole (`90s`, `250ms`); the loader reads microseconds at finest.
    static func duration(_ value: Duration) -> String {
        let (seconds, attoseconds) = value.components
        if seconds == 0 && attoseconds == 0 { return "0s" }
        if attoseconds == 0 {
            for (unit, length) in [("d", Int64(86400)), ("h", 3600), ("m", 60)] where seconds % length == 0 {
                return "\(seconds / length)\(unit)"
            }
            return "\(seconds)s"
        }
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        return microseconds % 1000 == 0 ? "\(microseconds / 1000)ms" : "\(microseconds)us"
    }

    /// A byte size in the largest binary unit that holds it whole (`256MiB`), else in bytes.
    static func size(_ bytes: Int) -> String {
        guard bytes > 0 else { return "0" }
        for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] where bytes % (1 << shift) == 0 {
            return "\(bytes >> shift)\(unit)"
        }
        return "\(bytes)"
    }

    /// A flow list: `[a, b]`.
    private static func list(_ values: [String]) -> String {
        "[" + values.map { scalar($0, flow: true) }.joined(separator: ", ") + "]"
    }

    /// A string as YAML reads it back as that same string: plain when nothing in it has a meaning to YAML,
    /// else double-quoted. URL credentials are replaced first.
    ///
    /// - Parameter flow: whether it stands inside `[...]` or `{...}`, where a `:` is better quoted too.
    static func scalar(_ text: String, flow: Bool = false) -> String {
        quoted(redactingURLCredentials(text), flow: flow)
    }

    /// A string as YAML reads it back as that same string, as ``scalar(_:flow:)`` writes it but without replacing
    /// URL credentials: for text that has its secrets redacted already, like a ``PostgresURL``'s description.
    private static func quoted(_ text: String, flow: Bool = false) -> String {
        if isPlain(text, flow: flow) { return text }
        var quoted = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\n": quoted += "\\n"
            case "\t": quoted += "\\t"
            case "\r": quoted += "\\r"
            // Next line, line and paragraph separators and the byte order mark: YAML may take them as breaks.
            case "\u{85}", "\u{2028}", "\u{2029}", "\u{FEFF}":
                quoted += "\\u" + hex(scalar.value, digits: 4)
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    quoted += "\\x" + hex(scalar.value, digits: 2)
                } else {
                    quoted.unicodeScalars.append(scalar)
                }
            }
        }
        return quoted + "\""
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }

    /// Whether `text` reads back as itself, a string, when written bare: it starts with a letter or `/` (not a
    /// number, not an indicator), holds only letters, digits and `-_./:+=~` (no space, comment or flow
    /// character), and is not a word YAML reads as a boolean or null.
    private static func isPlain(_ text: String, flow: Bool) -> Bool {
        guard let first = text.utf8.first, isLetter(first) || first == UInt8(ascii: "/") else { return false }
        let others = flow ? "-_./+=~" : "-_./:+=~"
        guard text.utf8.allSatisfy({ isLetter($0) || isDigit($0) || others.utf8.contains($0) }) else { return false }
        if text.hasSuffix(":") { return false }
        let words: Set<String> = ["y", "n", "yes", "no", "on", "off", "true", "false", "null"]
        return !words.contains(text.lowercased())
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (byte | 0x20) >= UInt8(ascii: "a") && (byte | 0x20) <= UInt8(ascii: "z")
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    /// `text` with the user information of every URL in it (`scheme://user:pass@`) replaced by ``redacted``.
    public static func redactingURLCredentials(_ text: String) -> String {
        var result = ""
        var rest = Substring(text)
        while let separator = rest.range(of: "://") {
            result += rest[..<separator.upperBound]
            let authority = rest[separator.upperBound...]
            let authorityEnd =
                authority.firstIndex { "/?#\"' \t\n\r<>".contains($0) } ?? authority.endIndex
            if let at = authority[..<authorityEnd].lastIndex(of: "@") {
                result += redacted
                rest = authority[at...]
            } else {
                rest = authority
            }
        }
        return result + rest
    }

    // MARK: Output

    private struct Writer {
        var text = ""

        mutating func line(_ line: String) {
            text += line + "\n"
        }

        mutating func comment(_ comment: String) {
            line("# " + comment)
        }

        /// `key: value` at `indent` levels of two spaces; an empty value opens a nested block.
        mutating func pair(_ indent: Int, _ key: String, _ value: String) {
            let pad = String(repeating: "  ", count: indent)
            line(value.isEmpty ? "\(pad)\(key):" : "\(pad)\(key): \(value)")
        }

        /// `- key: value`, the first pair of a list element at `indent` levels; its other pairs go one level deeper.
        mutating func item(_ indent: Int, _ key: String, _ value: String) {
            line("\(String(repeating: "  ", count: indent))- \(key): \(value)")
        }
    }
}
