import Testing

@testable import SDUIProxyCore

@Suite("Printing the configuration in force")
struct ConfigurationPrinterTests {
    /// Loads `configuration`'s printed text back with no environment and no flags.
    private func reloaded(
        _ configuration: ProxyConfiguration,
        adminTokenIsSet: Bool = false
    ) throws
        -> ProxyConfiguration
    {
        let text = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: adminTokenIsSet)
        return try ConfigurationLoader().load(yaml: text)
    }

    @Test("a default header the file removed stays removed when the printed configuration is loaded")
    func removedDefaultHeaderRoundTrips() throws {
        let configuration = try ConfigurationLoader().load(
            yaml: "upstream: { url: \"http://backend.test\" }\nheaders: { Content-Type: \"\", X-A: b }"
        )
        #expect(configuration.headers.map(\.name) == ["X-A"])
        #expect(try reloaded(configuration) == configuration)
    }

    @Test("the defaults, printed, load back to the defaults")
    func defaultsRoundTrip() throws {
        #expect(try reloaded(ProxyConfiguration()) == ProxyConfiguration())
    }

    @Test("every section, with values off the defaults, loads back to the same configuration")
    func everySectionRoundTrips() throws {
        let yaml = """
            listen: { host: "::", port: 8181, trustedProxies: [10.0.0.0/8, "::1"], tls: { certificate: "/etc/tls/a cert.pem", privateKey: /etc/tls/key.pem, minimumVersion: "1.3" }, http2: false, http2Limits: { maxConcurrentStreams: 7, maxHeaderListBytes: 2KiB } }
            admin: { host: localhost, port: 0 }
            upstream: { url: "https://backend:8443/bff", timeout: 1500ms, bodyIdleTimeout: 7s, connectTimeout: 250us, maxConnections: 3, maxResponseBytes: 1000, caFile: /etc/ca.pem }
            platform: { header: x-platform, default: ios, allowed: [] }
            headers:
              X-Api-Key: "a value: with # signs, \\"quotes\\" and \\\\ slashes"
              X.Odd!Name: "true"
              Content-Type: application/json
            cache:
              maxBytes: 3000
              maxEntries: 12
              defaultTTL: 90s
              staleIfError: 2h
              validateComponents: false
              vary: [Accept-Language]
              tagHeader: X-Tags
              exposeTags: true
              rangeMiss: part
              maxPartsPerEntry: 3
              routes:
                - { prefix: "/a b/", defaultTTL: 1d, bypass: true }
                - { prefix: /assets/, validateComponents: true, vary: [] }
            prefetch:
              urls: [/screens/home, "https://backend:8443/bff/screens/x?y=1"]
              platforms: [IOS]
              followActions: 0
              concurrency: 2
              refresh: true
              allowedHosts: [cdn.example, "api.example:8443"]
              maxURLsPerRequest: 9
              maxRequestBytes: 65
            limits: { maxHeaderBytes: 300, maxHeaderCount: 7, maxURLBytes: 17, maxBodyBytes: 0, requestTimeout: 2m, idleTimeout: 61s, maxConnections: 5 }
            eventLoops: { count: 3, yieldAfter: 0 }
            compat: { beagleHash: true }
            log: { level: DEBUG, format: json, access: true }
            tracing: { otlp: { endpoint: "http://collector:4318/", protocol: http/json }, sampleRatio: 0.25, serviceName: "edge proxy" }
            cluster: { postgres: "postgres://sdui@[::1]:6432/proxy?sslmode=require", replicaName: blue-1 }
            queue:
              store: "relative dir/queue"
              leaseTimeout: 45s
              maxDepth: 10
              maxBodyBytes: 1KiB
              retryableStatuses: [429, 503]
              concurrency: 4
              retention: 3d
              routes:
                - { match: POST /api/orders, ordering: concurrent, retry: { maxAttempts: 2, backoff: 10ms, maxBackoff: 1s, maxAge: 1h } }
                - { match: PUT /api/carts/ }
              handlers:
                - { on: [delivered], match: POST /api/orders, invalidatePrefix: /screens/orders }
                - { on: [failed, delivered], invalidateTag: "orders list" }
                - { webhook: "https://hooks.example/queue?x=1" }
            """
        let configuration = try ConfigurationLoader().load(yaml: yaml)
        #expect(configuration.queue?.handlers.count == 3)
        #expect(try reloaded(configuration) == configuration)
    }

    @Test("the environment and the flags are in what is printed")
    func environmentAndFlags() throws {
        let loader = ConfigurationLoader(environment: [
            "SDUI_PROXY_CACHE_DEFAULT_TTL": "7s", "SDUI_PROXY_QUEUE_ROUTES": "[{match: POST /x}]",
        ])
        let configuration = try loader.load(
            yaml: "cache: { defaultTTL: 1s }\n",
            overrides: CommandLineOverrides(port: 9999, adminPort: 9998, upstream: "file:elsewhere")
        )
        let text = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: false)
        #expect(text.contains("defaultTTL: 7s"))
        #expect(text.contains("port: 9999"))
        #expect(text.contains("url: file:elsewhere"))
        #expect(try ConfigurationLoader().load(yaml: text) == configuration)
    }

    @Test("PostgreSQL URLs are printed with the user and without the password, and load back but for it")
    func postgresURLs() throws {
        let configuration = try ConfigurationLoader(environment: [
            "SDUI_PROXY_CLUSTER_POSTGRES": "postgres://sdui:hunter2@db:5432/sdui?sslmode=verify-full",
            "SDUI_PROXY_QUEUE_STORE": "postgresql://queue:s3cret%21@db/q",
        ]).load(yaml: "upstream: { url: \"http://backend.test\" }\nqueue: {}")
        let text = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: false)
        for secret in ["hunter2", "s3cret"] { #expect(!text.contains(secret), "\(text)") }
        #expect(text.contains("postgres: \"postgres://sdui:<redacted>@db?sslmode=verify-full\""))
        #expect(text.contains("store: \"postgres://queue:<redacted>@db/q\""))
        #expect(text.contains("leaseTimeout: 30s"))

        var reloaded = try ConfigurationLoader().load(yaml: text)
        #expect(reloaded.cluster.postgres?.password == ConfigurationPrinter.redacted)
        reloaded.cluster.postgres?.password = "hunter2"
        #expect(reloaded.cluster == configuration.cluster)
        #expect(
            try reloaded.queue?.storeLocation
                == .postgres(PostgresURL(user: "queue", password: "<redacted>", host: "db", database: "q"))
        )

        let single = ConfigurationPrinter.yaml(ProxyConfiguration(), adminTokenIsSet: false)
        #expect(single.contains("cluster:\n  postgres: \"\"\n  replicaName: \"\"\n"))
    }

    @Test("durations and sizes are written in the largest unit that holds them whole")
    func units() {
        #expect(ConfigurationPrinter.duration(.zero) == "0s")
        #expect(ConfigurationPrinter.duration(.seconds(86400 * 2)) == "2d")
        #expect(ConfigurationPrinter.duration(.seconds(7200)) == "2h")
        #expect(ConfigurationPrinter.duration(.seconds(120)) == "2m")
        #expect(ConfigurationPrinter.duration(.seconds(90)) == "90s")
        #expect(ConfigurationPrinter.duration(.milliseconds(1500)) == "1500ms")
        #expect(ConfigurationPrinter.duration(.microseconds(250)) == "250us")
        #expect(ConfigurationPrinter.size(256 << 20) == "256MiB")
        #expect(ConfigurationPrinter.size(1 << 30) == "1GiB")
        #expect(ConfigurationPrinter.size(16 << 10) == "16KiB")
        #expect(ConfigurationPrinter.size(1000) == "1000")
        #expect(ConfigurationPrinter.size(0) == "0")
    }

    @Test("strings YAML would read as something else are quoted")
    func quoting() {
        #expect(ConfigurationPrinter.scalar("beagle-platform") == "beagle-platform")
        #expect(ConfigurationPrinter.scalar("file:config/samples") == "file:config/samples")
        #expect(ConfigurationPrinter.scalar("0.0.0.0") == "\"0.0.0.0\"")
        #expect(ConfigurationPrinter.scalar("yes") == "\"yes\"")
        #expect(ConfigurationPrinter.scalar("a b") == "\"a b\"")
        #expect(ConfigurationPrinter.scalar("x\ny\u{7}") == "\"x\\ny\\x07\"")
        #expect(ConfigurationPrinter.scalar("http://h/x", flow: true) == "\"http://h/x\"")
    }

    @Test("no secret is printed: the admin token, URL credentials, authorization headers")
    func redaction() throws {
        var configuration = ProxyConfiguration()
        configuration.headers = [
            ("X-Callback", "https://svc:hunter2@auth.internal/token"),
            ("Authorization", "Bearer upstream-secret"),
        ]
        configuration.upstream.url = "file://user:pa55@elsewhere"
        let text = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: true)
        for secret in ["hunter2", "svc:", "upstream-secret", "pa55", "user:"] {
            #expect(!text.contains(secret), "\(secret)")
        }
        #expect(text.contains("SDUI_PROXY_ADMIN_TOKEN: <redacted>"))
        #expect(text.contains("\"https://<redacted>@auth.internal/token\""))
        #expect(ConfigurationPrinter.yaml(ProxyConfiguration(), adminTokenIsSet: false).contains("TOKEN: not set"))
        #expect(
            ConfigurationPrinter.redactingURLCredentials("a http://u:p@h:1/x?q=http://v@w b")
                == "a http://<redacted>@h:1/x?q=http://<redacted>@w b"
        )
        #expect(ConfigurationPrinter.redactingURLCredentials("http://h/p@q") == "http://h/p@q")
    }
}

@Suite("sdui-proxy health: what is asked and what counts as alive")
struct HealthCheckTests {
    @Test("wildcard addresses are asked on loopback")
    func probeHost() {
        #expect(HealthCheck.probeHost(forListenerHost: "0.0.0.0") == "127.0.0.1")
        #expect(HealthCheck.probeHost(forListenerHost: "::") == "::1")
        #expect(HealthCheck.probeHost(forListenerHost: "[::]") == "::1")
        #expect(HealthCheck.probeHost(forListenerHost: "[::1]") == "::1")
        #expect(HealthCheck.probeHost(forListenerHost: "10.0.0.7") == "10.0.0.7")
        #expect(HealthCheck.probeHost(forListenerHost: "localhost") == "localhost")
    }

    @Test("only a 200 whose JSON says status ok is alive")
    func verdict() {
        #expect(HealthCheck.problem(status: 200, body: Array(#"{"status":"ok"}"#.utf8)) == nil)
        #expect(HealthCheck.problem(status: 200, body: Array(#" { "status" : "ok" } "#.utf8)) == nil)
        #expect(HealthCheck.problem(status: 503, body: Array(#"{"status":"ok"}"#.utf8))?.contains("503") == true)
        #expect(HealthCheck.problem(status: 200, body: Array(#"{"status":"down"}"#.utf8)) != nil)
        #expect(HealthCheck.problem(status: 200, body: Array("ok\nok".utf8))?.contains("\n") == false)
        #expect(HealthCheck.problem(status: 200, body: []) != nil)
        // Only the root's own `status`, the last one when it says it twice, read unescaped.
        #expect(HealthCheck.problem(status: 200, body: Array(#"{"status":"\u006fk"}"#.utf8)) == nil)
        #expect(HealthCheck.problem(status: 200, body: Array(#"{"status":"ok","status":"down"}"#.utf8)) != nil)
        #expect(HealthCheck.problem(status: 200, body: Array(#"{"x":{"status":"ok"}}"#.utf8)) != nil)
        #expect(HealthCheck.problem(status: 200, body: Array(#"[{"status":"ok"}]"#.utf8)) != nil)
        #expect(HealthCheck.problem(status: 200, body: Array(#"{"status":"ok"} x"#.utf8)) != nil)
    }

    @Test("a queue route's creates rule is printed and loads back the same")
    func createsRoundTrip() throws {
        let configuration = try ConfigurationLoader().load(
            yaml: """
                upstream: { url: "http://backend.test" }
                queue:
                  routes:
                    - match: POST /api/orders
                      creates: { localId: { header: X-Local-Id }, remoteId: { header: Location, pattern: "/api/orders/{id}" } }
                    - match: POST /api/carts
                      creates: { localId: { json: /local/id }, remoteId: { json: /id } }
                """
        )
        let text = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: false)
        #expect(text.contains("creates: { localId: { header: X-Local-Id }"), "\(text)")
        #expect(try ConfigurationLoader().load(yaml: text) == configuration)
    }
}
