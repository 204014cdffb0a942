import Foundation
import NIOCore
import SDUIProxyCore
import Testing

@Suite("Configuration: file, environment and flags")
struct ConfigurationTests {
    /// The backend the tests' files name when they are about something else: a file must name one.
    static let backend = "http://backend.test"

    /// Loads `yaml`, with `upstream: { url: backend }` before it when it has no `upstream` section of its own.
    private func load(
        _ yaml: String,
        environment: [String: String] = [:],
        overrides: CommandLineOverrides = .init()
    )
        throws(ConfigurationError) -> ProxyConfiguration
    {
        // Only before a mapping's keys: a file that is something else is left to fail as it is.
        let isMapping = yaml.first.map { $0.isLetter } ?? true
        let named =
            yaml.contains("upstream") || !isMapping ? yaml : "upstream: { url: \"\(Self.backend)\" }\n" + yaml
        return try ConfigurationLoader(environment: environment).load(yaml: named, overrides: overrides)
    }

    private func error(_ yaml: String, environment: [String: String] = [:]) -> ConfigurationError? {
        do {
            _ = try load(yaml, environment: environment)
            return nil
        } catch {
            return error
        }
    }

    @Test("a file that names only the backend is the defaults")
    func defaults() throws {
        let configuration = try load("")
        var defaults = ProxyConfiguration()
        defaults.upstream.url = Self.backend
        #expect(configuration == defaults)
        #expect(configuration.listen.port == 8080)
        #expect(configuration.admin.host == "127.0.0.1")
        #expect(configuration.cache.maxBytes == 256 << 20)
        #expect(configuration.cache.policy.defaultTTL == .zero)
        #expect(configuration.cache.policy.defaultTTLSeconds == 0)
        #expect(configuration.cache.policy.staleIfErrorSeconds == 600)
        #expect(configuration.prefetch.urls.isEmpty)
    }

    @Test("upstream.maxBufferedBytes is at least maxResponseBytes: by default, and refused below it")
    func bufferedBytes() throws {
        #expect(try load("").upstream.maxBufferedBytes == 64 << 20)
        #expect(
            try load("upstream: { url: \"\(Self.backend)\", maxBufferedBytes: 16MiB }").upstream.maxBufferedBytes
                == 16 << 20
        )
        // A larger per-response limit raises the default, so one such response can still be held.
        #expect(
            try load("upstream: { url: \"\(Self.backend)\", maxResponseBytes: 100MiB }").upstream.maxBufferedBytes
                == 100 << 20
        )
        let refused = try #require(error("upstream: { maxBufferedBytes: 1MiB }"))
        #expect("\(refused)".contains("upstream.maxBufferedBytes"))
        #expect("\(refused)".contains("at least upstream.maxResponseBytes"))
    }

    @Test("upstream.maxForwardConnections: half of maxConnections by default, at most maxConnections")
    func forwardConnections() throws {
        let defaults = try load("")
        #expect(defaults.upstream.maxForwardConnections == nil)
        #expect(defaults.upstream.forwardConnectionLimit == 32)
        #expect(
            try load("upstream: { url: \"\(Self.backend)\", maxConnections: 10 }").upstream.forwardConnectionLimit == 5
        )
        #expect(
            try load("upstream: { url: \"\(Self.backend)\", maxConnections: 1 }").upstream.forwardConnectionLimit == 1
        )
        let set = try load("upstream: { url: \"\(Self.backend)\", maxConnections: 10, maxForwardConnections: 10 }")
        #expect(set.upstream.forwardConnectionLimit == 10)
        let printed = ConfigurationPrinter.yaml(set, adminTokenIsSet: false)
        #expect(printed.contains("maxForwardConnections: 10"), "\(printed)")
        #expect(try load(printed) == set)
        // Left out, it is left out of the print too: it follows maxConnections wherever that comes from.
        #expect(!ConfigurationPrinter.yaml(defaults, adminTokenIsSet: false).contains("maxForwardConnections"))
        let fromEnvironment = try load("", environment: ["SDUI_PROXY_UPSTREAM_MAX_FORWARD_CONNECTIONS": "3"])
        #expect(fromEnvironment.upstream.forwardConnectionLimit == 3)
        let over = try #require(
            error("upstream: { url: \"\(Self.backend)\", maxConnections: 8, maxForwardConnections: 9 }")
        )
        #expect(over.key == "upstream.maxForwardConnections")
        #expect("\(over)".contains("at most upstream.maxConnections (8)"), "\(over)")
        let zero = try #require(error("upstream: { url: \"\(Self.backend)\", maxForwardConnections: 0 }"))
        #expect(zero.key == "upstream.maxForwardConnections")
    }

    @Test("limits.requestBufferBytes and requestBufferDirectory: 64KiB and the system's temporary directory")
    func requestBuffering() throws {
        let defaults = try load("")
        #expect(defaults.limits.requestBufferBytes == 64 << 10)
        #expect(defaults.limits.requestBufferDirectory == nil)
        let set = try load("limits: { requestBufferBytes: 1MiB, requestBufferDirectory: /var/spool/proxy }")
        #expect(set.limits.requestBufferBytes == 1 << 20)
        #expect(set.limits.requestBufferDirectory == "/var/spool/proxy")
        let fromEnvironment = try load("", environment: ["SDUI_PROXY_LIMITS_REQUEST_BUFFER_BYTES": "0"])
        #expect(fromEnvironment.limits.requestBufferBytes == 0, "0 writes every body to a file")
        let bad = try #require(error("limits: { requestBufferBytes: lots }"))
        #expect(bad.key == "limits.requestBufferBytes")
        let printed = ConfigurationPrinter.yaml(set, adminTokenIsSet: false)
        #expect(try load(printed) == set)
    }

    @Test("stream: true on a bypass route streams uploads; anywhere else it is refused, naming the key")
    func streamingRoutes() throws {
        let yaml = "cache: { routes: [{ prefix: /uploads/, bypass: true, stream: true }, { prefix: /api/ }] }"
        let configuration = try load(yaml)
        #expect(configuration.cache.routes.map(\.policy.stream) == [true, false])
        #expect(try load(ConfigurationPrinter.yaml(configuration, adminTokenIsSet: false)) == configuration)
        let notBypass = try #require(error("cache: { routes: [{ prefix: /screens/, stream: true }] }"))
        #expect(notBypass.key.hasSuffix("stream"), "\(notBypass)")
        #expect(notBypass.key.hasPrefix("cache.routes"), "\(notBypass)")
        #expect("\(notBypass)".contains("bypass: true"), "\(notBypass)")
        let topLevel = try #require(error("cache: { stream: true }"))
        #expect(topLevel.key == "cache.stream")
        #expect(try load("cache: { routes: [{ prefix: /screens/, stream: false }] }").cache.routes.count == 1)
    }

    @Test("upstream.caFile is read from the file or SDUI_PROXY_UPSTREAM_CA_FILE, absent by default, and printed")
    func caFile() throws {
        #expect(try load("").upstream.caFile == nil)
        let yaml = "upstream: { url: \"https://backend.internal\", caFile: /etc/ssl/internal-ca.pem }"
        #expect(try load(yaml).upstream.caFile == "/etc/ssl/internal-ca.pem")
        let fromEnvironment = try load(yaml, environment: ["SDUI_PROXY_UPSTREAM_CA_FILE": "/run/ca.pem"])
        #expect(fromEnvironment.upstream.caFile == "/run/ca.pem")
        let printed = ConfigurationPrinter.yaml(fromEnvironment, adminTokenIsSet: false)
        #expect(printed.contains("caFile: /run/ca.pem"), "\(printed)")
        #expect(printed.contains("bodyIdleTimeout: 30s"), "\(printed)")
    }

    @Test("listen.tls turns TLS on with a certificate and its key, from the file or SDUI_PROXY_LISTEN_TLS_*")
    func listenTLS() throws {
        #expect(try load("").listenProtocols.tls == nil, "clear text by default")
        let yaml = "listen: { tls: { certificate: /tls/cert.pem, privateKey: /tls/key.pem } }"
        let tls = try #require(try load(yaml).listenProtocols.tls)
        #expect(tls == .init(certificate: "/tls/cert.pem", privateKey: "/tls/key.pem", minimumVersion: .v1_2))
        let fromEnvironment = try load(
            "",
            environment: [
                "SDUI_PROXY_LISTEN_TLS_CERTIFICATE": "/run/secrets/cert.pem",
                "SDUI_PROXY_LISTEN_TLS_PRIVATE_KEY": "/run/secrets/key.pem",
                "SDUI_PROXY_LISTEN_TLS_MINIMUM_VERSION": "1.3",
            ]
        )
        #expect(
            fromEnvironment.listenProtocols.tls
                == .init(
                    certificate: "/run/secrets/cert.pem",
                    privateKey: "/run/secrets/key.pem",
                    minimumVersion: .v1_3
                )
        )
        let printed = ConfigurationPrinter.yaml(fromEnvironment, adminTokenIsSet: false)
        #expect(printed.contains("privateKey: /run/secrets/key.pem"), "\(printed)")

        let alone = try #require(error("listen: { tls: { certificate: /tls/cert.pem } }"))
        #expect(alone.key == "listen.tls.privateKey")
        #expect(alone.problem.contains("is not set"))
        #expect(try #require(error("listen: { tls: { privateKey: /k.pem } }")).key == "listen.tls.certificate")
        let old = try #require(error("listen: { tls: { certificate: /c, privateKey: /k, minimumVersion: \"1.1\" } }"))
        #expect(old.key == "listen.tls.minimumVersion")
        #expect(old.problem.contains("1.2 or 1.3"))
        #expect(try #require(error("listen: { tls: { ciphers: x } }")).key == "listen.tls.ciphers")
    }

    @Test("listen.http2 is on by default; its limits have defaults, bounds and variables of their own")
    func listenHTTP2() throws {
        let defaults = try load("").listenProtocols
        #expect(defaults.http2)
        #expect(defaults.maxConcurrentStreams == 100)
        #expect(defaults.maxHeaderListBytes == 16 * 1024)
        let configured = try load(
            "listen: { http2: false, http2Limits: { maxConcurrentStreams: 8, maxHeaderListBytes: 4KiB } }"
        ).listenProtocols
        #expect(!configured.http2)
        #expect(configured.maxConcurrentStreams == 8)
        #expect(configured.maxHeaderListBytes == 4096)
        let fromEnvironment = try load(
            "",
            environment: [
                "SDUI_PROXY_LISTEN_HTTP2": "false", "SDUI_PROXY_LISTEN_HTTP2_LIMITS_MAX_CONCURRENT_STREAMS": "3",
            ]
        ).listenProtocols
        #expect(!fromEnvironment.http2)
        #expect(fromEnvironment.maxConcurrentStreams == 3)
        let none = try #require(error("listen: { http2Limits: { maxConcurrentStreams: 0 } }"))
        #expect(none.key == "listen.http2Limits.maxConcurrentStreams")
        let tiny = try #require(error("listen: { http2Limits: { maxHeaderListBytes: 100 } }"))
        #expect(tiny.key == "listen.http2Limits.maxHeaderListBytes")
    }

    @Test("the bundled config file is valid and serves the samples")
    func bundledFile() throws {
        let root = String(#filePath).split(separator: "/").dropLast(3).joined(separator: "/")
        let configuration = try ConfigurationLoader().load(path: "/" + root + "/config/sdui-proxy.yaml")
        #expect(configuration.upstream.url == "file:config/samples")
        #expect(configuration.cache.routes.map(\.prefix) == ["/assets/", "/api/session"])
        #expect(configuration.cache.policy(forPath: "/api/session/x").bypass)
        #expect(configuration.prefetch.urls == ["/screens/home"])
    }

    @Test("sizes, durations and sections are read")
    func values() throws {
        let configuration = try load(
            """
            listen: { host: 127.0.0.1, port: 8081 }
            upstream: { url: "http://backend:8081/bff", timeout: 250ms, maxConnections: 8 }
            platform: { header: x-platform, default: ios }
            headers: { X-Api-Key: secret, Content-Type: application/json }
            cache:
              maxBytes: 64MiB
              defaultTTL: 5m
              vary: [Accept-Language]
              routes:
                - { prefix: /assets/, defaultTTL: 1d, validateComponents: false }
                - { prefix: /assets/private/, bypass: true }
            log: { level: debug }
            eventLoops: { count: 3, yieldAfter: 100us }
            """
        )
        #expect(configuration.listen == .init(host: "127.0.0.1", port: 8081))
        #expect(configuration.upstream.timeout == .milliseconds(250))
        #expect(configuration.platform.defaultValue == "IOS")
        #expect(configuration.headers.map(\.name) == ["X-Api-Key", "Content-Type"])
        #expect(configuration.cache.maxBytes == 64 << 20)
        #expect(configuration.cache.policy.defaultTTL == .seconds(300))
        #expect(configuration.cache.policy.defaultTTLSeconds == 300)
        #expect(configuration.cache.policy.vary == ["accept-language"])
        let assets = configuration.cache.policy(forPath: "/assets/logo.png")
        #expect(assets.defaultTTL == .seconds(86400))
        #expect(assets.defaultTTLSeconds == 86400)
        #expect(!assets.validateComponents)
        #expect(assets.vary == ["accept-language"])
        #expect(configuration.cache.policy(forPath: "/assets/private/a").bypass)
        #expect(!configuration.cache.policy(forPath: "/screens/home").bypass)
        #expect(configuration.log.level == "debug")
        #expect(configuration.eventLoops.count == 3)
        #expect(configuration.eventLoops.yieldAfter == .microseconds(100))
    }

    @Test("environment variables override the file, flags override both")
    func precedence() throws {
        let yaml = "listen: { port: 8081 }\nupstream: { url: \"http://a:1\" }\ncache: { maxBytes: 1MiB }"
        let environment = [
            "SDUI_PROXY_LISTEN_PORT": "8082",
            "SDUI_PROXY_UPSTREAM_URL": "http://b:2",
            "SDUI_PROXY_CACHE_MAX_BYTES": "2MiB",
            "SDUI_PROXY_PREFETCH_URLS": "[/a, /b]",
            "SDUI_PROXY_ADMIN_TOKEN": "not a config key, and allowed",
        ]
        let fromEnvironment = try load(yaml, environment: environment)
        #expect(fromEnvironment.listen.port == 8082)
        #expect(fromEnvironment.upstream.url == "http://b:2")
        #expect(fromEnvironment.cache.maxBytes == 2 << 20)
        #expect(fromEnvironment.prefetch.urls == ["/a", "/b"])

        let fromFlags = try load(
            yaml,
            environment: environment,
            overrides: .init(port: 9000, adminPort: 9001, upstream: "http://c:3")
        )
        #expect(fromFlags.listen.port == 9000)
        #expect(fromFlags.admin.port == 9001)
        #expect(fromFlags.upstream.url == "http://c:3")
    }

    @Test(
        "bad values stop start-up with a message that names the key",
        arguments: [
            ("cache: { maxBytes: lots }", "cache.maxBytes", "expected a size"),
            ("listen: { port: 70000 }", "listen.port", "out of range"),
            ("listen: { port: eighty }", "listen.port", "expected a whole number"),
            ("upstream: { timeout: 5 }", "upstream.timeout", "expected a duration"),
            ("upstream: { url: ftp://x }", "upstream.url", "not an http://"),
            ("cache: { colour: blue }", "cache.colour", "unknown key"),
            ("lisen: { port: 1 }", "lisen", "unknown key"),
            ("cache: { routes: [ { prefix: assets } ] }", "cache.routes[0].prefix", "must be a path"),
            ("cache: { validateComponents: maybe }", "cache.validateComponents", "true or false"),
            ("platform: { default: TV }", "platform.default", "not one of platform.allowed"),
            ("log: { level: loud }", "log.level", "must be one of"),
            ("headers: { \"Bad Name\": x }", "headers", "not a header name"),
            ("listen: { trustedProxies: [10.0.0.0/33] }", "listen.trustedProxies", "not an IP address or CIDR"),
            ("listen: { trustedProxies: [lb.internal] }", "listen.trustedProxies", "not an IP address or CIDR"),
            ("admin: { trustedProxies: [10.0.0.0/8] }", "admin.trustedProxies", "unknown key"),
            ("prefetch: { followActions: -1 }", "prefetch.followActions", "out of range"),
            ("admin: { port: 8080 }", "admin.port", "cannot share"),
            ("eventLoops: { yieldAfter: 10us }", "eventLoops.yieldAfter", "from 50us to 100ms"),
            ("eventLoops: { yieldAfter: 1s }", "eventLoops.yieldAfter", "from 50us to 100ms"),
            ("eventLoops: { count: -1 }", "eventLoops.count", "out of range"),
            ("- just\n- a list", "(top level)", "expected a mapping"),
            ("cache: [1", "(file)", "not valid YAML"),
            ("cache: { heuristic: { fraction: 2 } }", "cache.heuristic.fraction", "not between 0 and 1"),
            ("cache: { heuristic: { fraction: much } }", "cache.heuristic.fraction", "a number between 0 and 1"),
            ("cache: { heuristic: { ceiling: 1h } }", "cache.heuristic.ceiling", "unknown key"),
            ("cache: { targetedFields: [\"CDN Cache\"] }", "cache.targetedFields", "not a header name"),
            ("cache: { maxErrorTTL: soon }", "cache.maxErrorTTL", "expected a duration"),
            ("cache: { name: \"my cache\" }", "cache.name", "not a token"),
            ("upstream: { bodyIdleTimeout: 0s }", "upstream.bodyIdleTimeout", "more than 0"),
        ]
    )
    func badValues(yaml: String, key: String, problem: String) {
        let failure = error(yaml)
        #expect(failure?.key == key, "\(yaml)")
        #expect(failure?.problem.contains(problem) == true, "\(String(describing: failure))")
        #expect(failure?.description.contains("\n") == false)
    }

    @Test("cache storage rules: defaults, the file's values, and unlimited")
    func storageRules() throws {
        let defaults = try load("").cache.storageRules
        #expect(defaults.targetedFields == ["cdn-cache-control"])
        #expect(defaults.heuristicFraction == 0.1 && defaults.heuristicMaximum == 3600)
        #expect(defaults.maxErrorLifetime == nil && defaults.storesSetCookie)
        #expect(try load("").cache.policy.staleIfError == .seconds(600))
        // The seconds each fill reads follow the durations, as the file sets them and as code does.
        var policy = try load("cache: { staleIfError: 90s, defaultTTL: 2m }").cache.policy
        #expect(policy.staleIfErrorSeconds == 90 && policy.defaultTTLSeconds == 120)
        policy.staleIfError = .milliseconds(2_500)
        policy.defaultTTL = .zero
        #expect(policy.staleIfErrorSeconds == 2 && policy.defaultTTLSeconds == 0)
        let rules = try load(
            "cache: { targetedFields: [Edge-Cache-Control, CDN-Cache-Control], heuristic: { fraction: 0.25, max: 10m },"
                + " maxErrorTTL: 30s, storeSetCookie: false }"
        ).cache.storageRules
        #expect(rules.targetedFields == ["edge-cache-control", "cdn-cache-control"])
        #expect(rules.heuristicFraction == 0.25 && rules.heuristicMaximum == 600)
        #expect(rules.maxErrorLifetime == 30 && !rules.storesSetCookie)
        let unlimited = try load(
            "cache: { maxErrorTTL: 30s }",
            environment: ["SDUI_PROXY_CACHE_MAX_ERROR_TTL": "unlimited"]
        )
        #expect(unlimited.cache.storageRules.maxErrorLifetime == nil)
    }

    @Test("configured headers add to the default Content-Type; the same name replaces it, an empty value removes it")
    func headersAddToDefaults() throws {
        #expect(try load("").headers.map { [$0.name, $0.value] } == [["Content-Type", "application/json"]])
        let added = try load("headers: { X-Api-Key: k }")
        #expect(
            added.headers.map { [$0.name, $0.value] } == [["Content-Type", "application/json"], ["X-Api-Key", "k"]]
        )
        let replaced = try load("headers: { content-type: application/vnd.beagle+json }")
        #expect(replaced.headers.map { [$0.name, $0.value] } == [["content-type", "application/vnd.beagle+json"]])
        let removed = try load("headers: { Content-Type: \"\", X-Api-Key: k }")
        #expect(removed.headers.map { [$0.name, $0.value] } == [["X-Api-Key", "k"]])
    }

    @Test("listen.trustedProxies takes addresses and CIDR blocks, from the file or the environment")
    func trustedProxies() throws {
        let configuration = try load("listen: { port: 8080, trustedProxies: [10.0.0.0/8, \"::1\", 192.0.2.7] }")
        #expect(configuration.trustedProxies.map(\.description) == ["10.0.0.0/8", "::1", "192.0.2.7"])
        #expect(try load("").trustedProxies.isEmpty)
        let fromEnvironment = try load("", environment: ["SDUI_PROXY_LISTEN_TRUSTED_PROXIES": "[127.0.0.1]"])
        #expect(fromEnvironment.trustedProxies.map(\.description) == ["127.0.0.1"])
    }

    @Test("declared URLs that could never be prefetched are refused at load, naming the URL")
    func unfetchablePrefetchURLs() throws {
        let upstream = "upstream: { url: \"http://backend.internal:8080/api\" }\n"
        let fine = try load(
            upstream + "prefetch: { urls: [/api/home, \"http://backend.internal:8080/api/x\"] }"
        )
        #expect(fine.prefetch.urls.count == 2)
        for bad in [
            "relative", "\"http://elsewhere.example/api/x\"", "\"http://backend.internal:8080/other\"",
            "\"/api/@{user.id}\"",
        ] {
            let failure = error(upstream + "prefetch: { urls: [\(bad)] }")
            #expect(failure?.key == "prefetch.urls", "\(bad)")
            #expect(failure?.problem.contains("cannot be prefetched") == true, "\(bad)")
        }
    }

    @Test("prefetch.maxRequestBytes may not pass the admin listener's 1MiB")
    func prefetchRequestBytesCapped() throws {
        #expect(try load("prefetch: { maxRequestBytes: 1MiB }").prefetch.maxRequestBytes == 1 << 20)
        #expect(error("prefetch: { maxRequestBytes: 2MiB }")?.key == "prefetch.maxRequestBytes")
    }

    @Test("a bad environment value names the variable, and unknown variables are refused")
    func badEnvironment() {
        let failure = error("", environment: ["SDUI_PROXY_LISTEN_PORT": "x"])
        #expect(failure?.key == "listen.port")
        #expect(failure?.problem.contains("SDUI_PROXY_LISTEN_PORT") == true)
        let unknown = error("", environment: ["SDUI_PROXY_LISTEN_PROT": "1"])
        #expect(unknown?.key == "SDUI_PROXY_LISTEN_PROT")
    }

    /// The README's configuration table: each key with its default and the environment variable that sets it.
    private static let documentedVariables: [(key: String, value: String, variable: String)] = {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = (try? String(contentsOf: readme, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, cells[2].hasPrefix("`SDUI_PROXY_"), !cells[2].contains("*") else { return nil }
            func unquoted(_ cell: String) -> String { cell.trimmingCharacters(in: CharacterSet(charactersIn: "`")) }
            return (unquoted(cells[0]), unquoted(cells[1]), unquoted(cells[2]))
        }
    }()

    @Test("every environment variable the README documents sets its key")
    func documentedVariablesAreKnown() throws {
        #expect(Self.documentedVariables.count > 40)
        for (key, value, variable) in Self.documentedVariables where !value.hasPrefix("none") {
            // (A key with no default, upstream.url, has its own test.) The default, given through the variable: the loader must read it (an unknown name is refused
            // whatever its value), and it must mean what it does in the file.
            let yaml = key.hasPrefix("queue.") ? "queue: { routes: [{ match: POST /api }] }" : ""
            let fromVariable = error(yaml, environment: [variable: value])
            #expect(fromVariable == nil, "\(variable)=\(value): \(String(describing: fromVariable))")
        }
    }

    @Test("cluster: a single node by default; postgres and replicaName from the file, the environment over it")
    func cluster() throws {
        let defaults = try load("")
        #expect(defaults.cluster == ClusterConfiguration())
        #expect(defaults.cluster.postgres == nil)
        #expect(defaults.cluster.replicaName == "")
        #expect(defaults.cluster.resolvedReplicaName(hostName: "web-1", processID: 4711) == "web-1-4711")

        let file = try load(
            """
            cluster:
              postgres: "postgresql://sdui:s%40cret@db.internal:6432/proxy?sslmode=verify-full&application_name=x"
              replicaName: blue-1
            """
        )
        let url = try #require(file.cluster.postgres)
        #expect(url.user == "sdui")
        #expect(url.password == "s@cret")
        #expect(url.host == "db.internal")
        #expect(url.port == 6432)
        #expect(url.database == "proxy")
        #expect(url.sslMode == .verifyFull)
        #expect(file.cluster.replicaName == "blue-1")
        #expect(file.cluster.resolvedReplicaName(hostName: "web-1", processID: 4711) == "blue-1")

        let overridden = try load(
            "cluster: { postgres: \"postgres://a@one/x\", replicaName: blue-1 }",
            environment: [
                "SDUI_PROXY_CLUSTER_POSTGRES": "postgres://sdui:secret@db:5432/sdui",
                "SDUI_PROXY_CLUSTER_REPLICA_NAME": "green-2",
            ]
        )
        #expect(
            overridden.cluster.postgres
                == PostgresURL(user: "sdui", password: "secret", host: "db", port: 5432, database: "sdui")
        )
        #expect(overridden.cluster.replicaName == "green-2")
        #expect(try load("", environment: ["SDUI_PROXY_CLUSTER_POSTGRES": ""]).cluster.postgres == nil)
    }

    @Test(
        "a bad cluster.postgres URL is refused, naming the key and what is wrong, never the password",
        arguments: [
            ("mysql://sdui:hunter2@db/sdui", "postgres://"),
            ("postgres://db/sdui", "no user name"),
            ("postgres://sdui:hunter2@/sdui", "no host"),
            ("postgres://sdui:hunter2@db:99999/sdui", "port"),
            ("postgres://sdui:hunter2@db:x/sdui", "port"),
            ("postgres://sdui:hunter2@[db]/sdui", "IPv6"),
            ("postgres://sdui:hunter2@d b/sdui", "spaces"),
            ("postgres://sdui:hunter2%zz@db/sdui", "percent"),
            ("postgres://sdui:hunter2@db/sdui?sslmode=prefer", "sslmode \"prefer\""),
            ("postgres://sdui:hunter2@db/sdui?connect_timeout=3", "connect_timeout"),
            ("postgres://sdui:hunter2@db/a/b", "database"),
            // A password with an unescaped / ends the host early: nothing of it may be echoed.
            ("postgres://sdui:hunter2/x@db/sdui", "no user name"),
        ]
    )
    func badPostgresURL(url: String, problem: String) throws {
        for (yaml, environment) in [
            ("cluster: { postgres: \"\(url)\" }", [String: String]()),
            ("", ["SDUI_PROXY_CLUSTER_POSTGRES": "\"\(url)\""]),
        ] {
            let error = try #require(self.error(yaml, environment: environment))
            #expect(error.key == "cluster.postgres")
            #expect(error.problem.contains(problem), "\(error)")
            #expect(!error.description.contains("hunter2"), "\(error)")
        }
    }

    @Test("cluster: unknown keys and bad replica names are refused")
    func badClusterKeys() {
        #expect(error("cluster: { postgress: x }")?.key == "cluster.postgress")
        #expect(error("cluster: { replicaName: \"a b\" }")?.key == "cluster.replicaName")
        #expect(error("cluster: { replicaName: \(String(repeating: "a", count: 129)) }")?.key == "cluster.replicaName")
        #expect(error("cluster: { replicaName: [a] }")?.key == "cluster.replicaName")
    }

    @Test("a PostgreSQL URL reads hosts of every kind, defaults the port and database, and hides the password")
    func postgresURL() throws {
        let ipv6 = try PostgresURL(parsing: "postgres://u:p@[::1]:7000")
        #expect(ipv6.host == "::1")
        #expect(ipv6.port == 7000)
        #expect(ipv6.database == "u")
        let ipv4 = try PostgresURL(parsing: "POSTGRESQL://u@10.0.0.7/")
        #expect(ipv4.host == "10.0.0.7")
        #expect(ipv4.port == 5432)
        #expect(ipv4.password == nil)
        #expect(ipv4.database == "u")
        #expect(try PostgresURL(parsing: "postgres://u:p@db?sslmode=require").sslMode == .require)
        #expect(try PostgresURL(parsing: "postgres://u:p@db?sslmode=disable").sslMode == .disable)
        #expect(try PostgresURL(parsing: "postgres://u%20x:@db/d%2Fb").user == "u x")
        #expect(try PostgresURL(parsing: "postgres://u%20x:@db/d%2Fb").database == "d/b")
        #expect(try PostgresURL(parsing: "postgres://u%20x:@db/d%2Fb").password == "")

        let url = try PostgresURL(parsing: "postgres://sdui:hunter2@[fd00::5]:6432/other?sslmode=verify-full")
        #expect(url.description == "postgres://sdui:<redacted>@[fd00::5]:6432/other?sslmode=verify-full")
        for text in [
            url.description, String(reflecting: url), "\(url)",
            String(describing: Mirror(reflecting: url).children.map(\.value)),
        ] {
            #expect(!text.contains("hunter2"), "\(text)")
        }
        var reread = try PostgresURL(parsing: url.description)
        #expect(reread.password == ConfigurationPrinter.redacted)
        reread.password = "hunter2"
        #expect(reread == url)
    }

    @Test("a missing file is an error that names the file")
    func missingFile() {
        #expect(throws: ConfigurationError.self) { try ConfigurationLoader().load(path: "/nonexistent/sdui.yaml") }
    }

    @Test("a configuration that names no upstream.url is refused; the file, the environment or a flag may name it")
    func upstreamRequired() throws {
        for yaml in ["", "cache: { defaultTTL: 60s }", "upstream: { timeout: 3s }"] {
            #expect(throws: ConfigurationError.self) { try ConfigurationLoader().load(yaml: yaml) }
            do {
                _ = try ConfigurationLoader().load(yaml: yaml)
            } catch {
                #expect(error.key == "upstream.url")
                #expect(error.problem.hasPrefix("is not set: name the component backend"))
            }
        }
        let environment = ["SDUI_PROXY_UPSTREAM_URL": "http://env:1"]
        #expect(try ConfigurationLoader(environment: environment).load(yaml: "").upstream.url == "http://env:1")
        let flagged = try ConfigurationLoader().load(yaml: "", overrides: .init(upstream: "file:config/samples"))
        #expect(flagged.upstream.url == "file:config/samples")
    }

    @Test("admin.probesOpen and prefetch.readyWhen: defaults, the file, the environment, and bad values")
    func probesAndReadiness() throws {
        let defaults = try load("")
        #expect(defaults.adminProbesOpen)
        #expect(defaults.prefetch.readyWhen == .finished)
        let configured = try load("admin: { probesOpen: false }\nprefetch: { readyWhen: succeeded }")
        #expect(!configured.adminProbesOpen)
        #expect(configured.prefetch.readyWhen == .succeeded)
        let fromEnvironment = try load(
            "",
            environment: ["SDUI_PROXY_ADMIN_PROBES_OPEN": "false", "SDUI_PROXY_PREFETCH_READY_WHEN": "succeeded"]
        )
        #expect(!fromEnvironment.adminProbesOpen)
        #expect(fromEnvironment.prefetch.readyWhen == .succeeded)
        let refused = try #require(error("prefetch: { readyWhen: warm }"))
        #expect(refused.key == "prefetch.readyWhen")
        #expect(refused.problem.contains("must be finished or succeeded"))
        #expect(error("admin: { probesOpen: sometimes }")?.key == "admin.probesOpen")
        let printed = ConfigurationPrinter.yaml(configured, adminTokenIsSet: false)
        #expect(printed.contains("probesOpen: false"))
        #expect(printed.contains("readyWhen: succeeded"))
        #expect(try ConfigurationLoader().load(yaml: printed) == configured)
    }

    @Test(
        "a file that is not valid YAML is named by its path, and a relative path that cannot be read is made absolute"
    )
    func fileErrorsNameTheFile() throws {
        let path = NSTemporaryDirectory() + "broken-\(UUID().uuidString).yaml"
        try Data("cache: [unclosed\n".utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(throws: ConfigurationError.self) { try ConfigurationLoader().load(path: path) }
        do {
            _ = try ConfigurationLoader().load(path: path)
        } catch {
            #expect(error.key == path)
            #expect(error.problem.hasPrefix("not valid YAML"))
        }
        let relative = "no-such-\(UUID().uuidString).yaml"
        do {
            _ = try ConfigurationLoader().load(path: relative)
            Issue.record("a missing file loaded")
        } catch {
            #expect(error.key == FileManager.default.currentDirectoryPath + "/" + relative)
        }
    }

    @Test("cache.rangeMiss and cache.maxPartsPerEntry: defaults, values, the environment and what is refused")
    func partialContent() throws {
        let defaults = try load("")
        #expect(defaults.cache.rangeMiss == .whole)
        #expect(defaults.cache.maxPartsPerEntry == 16)
        let set = try load("cache: { rangeMiss: part, maxPartsPerEntry: 4 }")
        #expect(set.cache.rangeMiss == .part)
        #expect(set.cache.maxPartsPerEntry == 4)
        let fromEnvironment = try load("", environment: ["SDUI_PROXY_CACHE_RANGE_MISS": "part"])
        #expect(fromEnvironment.cache.rangeMiss == .part)
        let unknown = error("cache: { rangeMiss: slices }")
        #expect(unknown?.key == "cache.rangeMiss")
        #expect(unknown?.problem.hasPrefix(#"must be whole or part, not "slices""#) == true)
        #expect(error("cache: { maxPartsPerEntry: 0 }")?.key == "cache.maxPartsPerEntry")
    }

    @Test("size and duration parsing")
    func parsing() {
        #expect(ConfigValueParsing.byteSize("256MiB") == 256 << 20)
        #expect(ConfigValueParsing.byteSize("1 KB") == 1000)
        #expect(ConfigValueParsing.byteSize("12") == 12)
        #expect(ConfigValueParsing.byteSize("-1MiB") == nil)
        #expect(ConfigValueParsing.byteSize("99999999999999GiB") == nil)
        #expect(ConfigValueParsing.duration("250ms") == .milliseconds(250))
        #expect(ConfigValueParsing.duration("250us") == .microseconds(250))
        #expect(ConfigValueParsing.duration("40\u{B5}s") == .microseconds(40))
        #expect(ConfigValueParsing.duration("40\u{3BC}s") == .microseconds(40))
        #expect(ConfigValueParsing.duration("1d") == .seconds(86400))
        #expect(ConfigValueParsing.duration("0") == .zero)
        #expect(ConfigValueParsing.duration("5") == nil)
        #expect(ConfigValueParsing.duration("1y") == nil)
    }

    @Test(
        "a duration past ten years is refused with an error that names its key, however large its number",
        arguments: [
            ("upstream: { timeout: 999999999999999999m }", "upstream.timeout"),
            ("upstream: { timeout: 3651d }", "upstream.timeout"),
            (
                "queue: { store: /tmp/q, routes: [{ match: POST /a, retry: { maxBackoff: 999999999999999999d } }] }",
                "maxBackoff"
            ),
            ("queue: { store: /tmp/q, routes: [{ match: POST /a, retry: { maxAge: 200000000h } }] }", "maxAge"),
        ]
    )
    func durationTooLong(yaml: String, key: String) {
        let refused = error(yaml)
        #expect(refused?.key.hasSuffix(key) == true)
        #expect(refused?.problem.contains("at most 3650d") == true)
        #expect(throws: Never.self) { try load("upstream: { url: \"\(Self.backend)\", timeout: 3650d }") }
    }
}

@Suite("Durations as NIO time amounts")
struct DurationTimeAmountTests {
    @Test(
        "whole nanoseconds, fractions below one dropped, clamped to what a TimeAmount holds",
        arguments: [
            (Duration.zero, Int64(0)), (.milliseconds(250), 250_000_000), (.seconds(1.5), 1_500_000_000),
            (.seconds(30), 30_000_000_000), (.nanoseconds(7), 7), (.seconds(Int64.max), .max),
            (.seconds(9_223_372_036), 9_223_372_036_000_000_000), (.seconds(9_223_372_037), .max), (.seconds(-3), 0),
            (Duration(secondsComponent: 2, attosecondsComponent: 999_999_999), 2_000_000_000),
        ] as [(Duration, Int64)]
    )
    func timeAmount(duration: Duration, nanoseconds: Int64) {
        #expect(duration.timeAmount.nanoseconds == nanoseconds)
    }
}
