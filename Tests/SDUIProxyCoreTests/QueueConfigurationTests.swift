import Testing

@testable import SDUIProxyCore

/// The `queue` section: defaults, the documented example, and errors that name the key path.
@Suite struct QueueConfigurationTests {
    private func parse(
        _ yaml: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> QueueConfiguration? {
        try QueueConfiguration.parse(yaml: yaml, environment: environment)
    }

    /// The key of the error that parsing `yaml` throws, or nil when it parses.
    private func errorKey(_ yaml: String) -> String? {
        do throws(ConfigurationError) {
            _ = try parse(yaml)
            return nil
        } catch {
            return error.key
        }
    }

    @Test func anAbsentSectionTurnsTheQueueOff() throws {
        #expect(try parse("listen: { port: 8080 }") == nil)
        #expect(try parse("") == nil)
    }

    @Test func anEmptySectionHasTheDefaults() throws {
        let queue = try #require(try parse("queue: {}"))
        #expect(queue == QueueConfiguration())
        #expect(queue.store == "/var/lib/sdui-proxy/queue")
        #expect(queue.maxDepth == 100_000)
        #expect(queue.maxBodyBytes == 1 << 20)
        #expect(queue.retryableStatuses == [502, 503, 504])
        #expect(queue.concurrency == 16)
        #expect(queue.routes.isEmpty)
        #expect(queue.handlers.isEmpty)
        let retry = QueueConfiguration.RetryPolicy()
        #expect(retry.maxAttempts == 20)
        #expect(retry.backoff == .milliseconds(500))
        #expect(retry.maxBackoff == .seconds(30))
        #expect(retry.maxAge == .seconds(86400))
    }

    @Test func theDocumentedExampleParses() throws {
        let yaml = """
            queue:
              store: /var/lib/sdui-proxy/queue
              maxDepth: 100000
              maxBodyBytes: 1MiB
              retryableStatuses: [502, 503, 504]
              concurrency: 16
              routes:
                - match: POST /api/orders
                  ordering: sequential
                  retry: { maxAttempts: 20, backoff: 500ms, maxBackoff: 30s, maxAge: 24h }
                - match: PUT /api/events
                  ordering: concurrent
              handlers:
                - on: [delivered]
                  invalidatePrefix: /screens/orders
                - on: [delivered, failed]
                  webhook: http://hooks.internal/queue
                - on: [delivered]
                  invalidateTag: orders
                  match: POST /api/orders
            """
        let queue = try #require(try parse(yaml))
        #expect(queue.routes.count == 2)
        let orders = queue.routes[0]
        #expect(orders.key == "POST /api/orders")
        #expect(orders.ordering == .sequential)
        #expect(
            orders.retry
                == .init(
                    maxAttempts: 20,
                    backoff: .milliseconds(500),
                    maxBackoff: .seconds(30),
                    maxAge: .seconds(86400)
                )
        )
        #expect(queue.routes[1].key == "PUT /api/events")
        #expect(queue.routes[1].ordering == .concurrent)
        #expect(queue.routes[1].retry == QueueConfiguration.RetryPolicy())
        #expect(
            queue.handlers == [
                .init(outcomes: [.delivered], action: .invalidatePrefix("/screens/orders")),
                .init(outcomes: [.delivered, .failed], action: .webhook("http://hooks.internal/queue")),
                .init(outcomes: [.delivered], route: "POST /api/orders", action: .invalidateTag("orders")),
            ]
        )
        #expect(queue.handlers[2].applies(to: .delivered, routeKey: "POST /api/orders"))
        #expect(!queue.handlers[2].applies(to: .delivered, routeKey: "PUT /api/events"))
        #expect(!queue.handlers[2].applies(to: .failed, routeKey: "POST /api/orders"))
    }

    @Test func theStoreIsADirectoryOrAPostgresURL() throws {
        let directory = try #require(try parse("queue: { store: /data/queue }"))
        #expect(try directory.storeLocation == .sqlite(path: "/data/queue"))
        #expect(try QueueConfiguration().storeLocation == .sqlite(path: "/var/lib/sdui-proxy/queue"))
        let shared = try #require(try parse("queue: { store: \"postgresql://q:pw@db:5433/queue?sslmode=require\" }"))
        #expect(
            try shared.storeLocation
                == .postgres(
                    PostgresURL(user: "q", password: "pw", host: "db", port: 5433, database: "queue", sslMode: .require)
                )
        )
        let fromEnvironment = try #require(
            try parse("queue: {}", environment: ["SDUI_PROXY_QUEUE_STORE": "postgres://q@db"])
        )
        #expect(try fromEnvironment.storeLocation == .postgres(PostgresURL(user: "q", host: "db")))
        // A path that merely mentions the scheme further on is still a path.
        let path = try #require(try parse("queue: { store: ./postgres://x }"))
        #expect(try path.storeLocation == .sqlite(path: "./postgres://x"))
    }

    @Test func aBadPostgresStoreIsNamedWithoutItsPassword() {
        do throws(ConfigurationError) {
            _ = try parse("queue: { store: \"postgres://q:hunter2@db/queue?sslmode=allow\" }")
            Issue.record("a bad store URL was accepted")
        } catch {
            #expect(error.key == "queue.store")
            #expect(error.problem.contains("sslmode \"allow\" is not one of disable, require, verify-full"))
            #expect(!error.description.contains("hunter2"))
        }
    }

    @Test func theLeaseTimeoutDefaultsTo30sAndMustBePositive() throws {
        #expect(try #require(try parse("queue: {}")).leaseTimeout == .seconds(30))
        #expect(try #require(try parse("queue: { leaseTimeout: 90s }")).leaseTimeout == .seconds(90))
        let overridden = try parse(
            "queue: { leaseTimeout: 90s }",
            environment: ["SDUI_PROXY_QUEUE_LEASE_TIMEOUT": "2m"]
        )
        #expect(overridden?.leaseTimeout == .seconds(120))
        #expect(errorKey("queue: { leaseTimeout: 0s }") == "queue.leaseTimeout")
        #expect(errorKey("queue: { leaseTimeout: soon }") == "queue.leaseTimeout")
    }

    @Test func theEnvironmentOverridesTheFile() throws {
        let queue = try #require(
            try parse(
                "queue: { maxDepth: 10 }",
                environment: ["SDUI_PROXY_QUEUE_MAX_DEPTH": "20", "SDUI_PROXY_QUEUE_STORE": "/data/queue"]
            )
        )
        #expect(queue.maxDepth == 20)
        #expect(queue.store == "/data/queue")
    }

    @Test(arguments: [
        ("queue: { retries: 3 }", "queue.retries"),
        ("queue: { routes: [ { match: POST /a, priority: 1 } ] }", "queue.routes[0].priority"),
        ("queue: { routes: [ { match: POST /a, retry: { tries: 3 } } ] }", "queue.routes[0].retry.tries"),
        ("queue: { handlers: [ { on: [delivered], invalidatePrefix: /a, extra: 1 } ] }", "queue.handlers[0].extra"),
    ])
    func unknownKeysAreNamed(yaml: String, key: String) {
        #expect(errorKey(yaml) == key)
    }

    @Test(arguments: [
        ("queue: { maxDepth: many }", "queue.maxDepth"),
        ("queue: { maxDepth: 0 }", "queue.maxDepth"),
        ("queue: { maxBodyBytes: huge }", "queue.maxBodyBytes"),
        ("queue: { concurrency: [1] }", "queue.concurrency"),
        ("queue: { retryableStatuses: 503 }", "queue.retryableStatuses"),
        ("queue: { retryableStatuses: [200] }", "queue.retryableStatuses"),
        ("queue: { retention: 0s }", "queue.retention"),
        ("queue: { routes: { match: POST /a } }", "queue.routes"),
        ("queue: { routes: [ { match: POST /a, retry: { backoff: soon } } ] }", "queue.routes[0].retry.backoff"),
        ("queue: { routes: [ { match: POST /a, retry: { maxAttempts: 0 } } ] }", "queue.routes[0].retry.maxAttempts"),
        (
            "queue: { routes: [ { match: POST /a, retry: { backoff: 2s, maxBackoff: 1s } } ] }",
            "queue.routes[0].retry.maxBackoff"
        ),
        ("queue: { routes: [ { match: POST /a, retry: { maxAge: 0s } } ] }", "queue.routes[0].retry.maxAge"),
    ])
    func wrongTypesAndValuesAreNamed(yaml: String, key: String) {
        #expect(errorKey(yaml) == key)
    }

    @Test(arguments: ["parallel", "SEQUENTIAL", "[sequential]"])
    func aBadOrderingIsNamed(ordering: String) {
        #expect(
            errorKey("queue: { routes: [ { match: POST /a, ordering: \(ordering) } ] }") == "queue.routes[0].ordering"
        )
    }

    @Test(arguments: [
        "POST", "/api/orders", "post /api/orders", "POST api/orders", "POST /a /b", "GET /api", "POST /a?x=1",
    ])
    func aBadMatchIsNamed(match: String) {
        let yaml = "queue:\n  routes:\n    - match: \(match)\n    - match: POST /fine\n"
        #expect(errorKey(yaml) == "queue.routes[0].match")
    }

    @Test func aRouteNeedsAMatchAndAppearsOnce() {
        #expect(errorKey("queue: { routes: [ { ordering: concurrent } ] }") == "queue.routes[0].match")
        #expect(errorKey("queue: { routes: [ { match: POST /a }, { match: POST /a } ] }") == "queue.routes[1].match")
    }

    @Test func handlerProblemsAreNamed() {
        #expect(errorKey("queue: { handlers: [ { on: [delivered] } ] }") == "queue.handlers[0]")
        #expect(errorKey("queue: { handlers: [ { invalidatePrefix: /a, invalidateTag: t } ] }") == "queue.handlers[0]")
        #expect(errorKey("queue: { handlers: [ { on: [done], invalidateTag: t } ] }") == "queue.handlers[0].on")
        #expect(errorKey("queue: { handlers: [ { on: [], invalidateTag: t } ] }") == "queue.handlers[0].on")
        #expect(errorKey("queue: { handlers: [ { webhook: hooks.internal/queue } ] }") == "queue.handlers[0].webhook")
        #expect(errorKey("queue: { handlers: [ { webhook: ftp://hooks/queue } ] }") == "queue.handlers[0].webhook")
        #expect(
            errorKey("queue: { handlers: [ { invalidatePrefix: screens } ] }") == "queue.handlers[0].invalidatePrefix"
        )
        #expect(
            errorKey("queue: { handlers: [ { invalidateTag: t, match: POST /unknown } ] }") == "queue.handlers[0].match"
        )
    }

    @Test func errorsSayWhatIsWrong() {
        do throws(ConfigurationError) {
            _ = try parse("queue: { routes: [ { match: POST /a, ordering: parallel } ] }")
            Issue.record("a bad ordering was accepted")
        } catch {
            #expect(error.problem.contains("\"parallel\" is not sequential or concurrent"))
            #expect(error.description.hasPrefix("config error: queue.routes[0].ordering:"))
        }
    }

    @Test func theLongestMatchingPrefixWinsWholeSegmentsOnly() throws {
        let queue = try #require(
            try parse(
                """
                queue:
                  routes:
                    - { match: POST /api, ordering: concurrent }
                    - { match: POST /api/orders }
                    - { match: DELETE /api/orders/ }
                """
            )
        )
        #expect(queue.route(method: "POST", path: "/api/orders")?.pathPrefix == "/api/orders")
        #expect(queue.route(method: "POST", path: "/api/orders/7?x=1")?.pathPrefix == "/api/orders")
        #expect(queue.route(method: "POST", path: "/api/orders-export")?.pathPrefix == "/api")
        #expect(queue.route(method: "POST", path: "/api?x=1")?.pathPrefix == "/api")
        #expect(queue.route(method: "POST", path: "/apiary") == nil)
        #expect(queue.route(method: "PUT", path: "/api/orders") == nil)
        #expect(queue.route(method: "DELETE", path: "/api/orders/7")?.key == "DELETE /api/orders/")
        #expect(queue.route(method: "DELETE", path: "/api/orders") == nil)
    }

    @Test("a route's creates: where the local identifier is read, and where the backend's")
    func createsParse() throws {
        let queue = try #require(
            try parse(
                """
                queue:
                  routes:
                    - match: POST /api/orders
                      creates:
                        localId: { header: X-Local-Id }
                        remoteId: { json: /id }
                    - match: POST /api/carts
                      creates:
                        localId: { json: /localId }
                        remoteId: { header: Location, pattern: "/api/carts/{id}" }
                    - match: PUT /api/orders
                """
            )
        )
        #expect(
            queue.routes[0].creates
                == CreateRule(localId: .header("X-Local-Id"), remoteId: .json(try #require(JSONPointer("/id"))))
        )
        #expect(
            queue.routes[1].creates
                == CreateRule(
                    localId: .json(try #require(JSONPointer("/localId"))),
                    remoteId: .headerPattern("Location", pattern: "/api/carts/{id}")
                )
        )
        #expect(queue.routes[2].creates == nil)
        #expect(QueueConfiguration.Outcome(rawValue: "dependencyFailed") == .dependencyFailed)
    }

    @Test("a creates rule that cannot be followed is refused, naming the key")
    func createsErrors() {
        func route(_ creates: String) -> String {
            "queue:\n  routes:\n    - match: POST /api/orders\n      creates: \(creates)\n"
        }
        #expect(errorKey(route("{ remoteId: { json: /id } }")) == "queue.routes[0].creates.localId")
        #expect(errorKey(route("{ localId: { header: X-Local-Id } }")) == "queue.routes[0].creates.remoteId")
        #expect(
            errorKey(route("{ localId: { header: X-Local-Id, json: /a }, remoteId: { json: /id } }"))
                == "queue.routes[0].creates.localId.json"
        )
        #expect(
            errorKey(route("{ localId: { json: id }, remoteId: { json: /id } }"))
                == "queue.routes[0].creates.localId.json"
        )
        #expect(
            errorKey(route("{ localId: { json: \"\" }, remoteId: { json: /id } }"))
                == "queue.routes[0].creates.localId.header"
        )
        #expect(
            errorKey(route("{ localId: { header: X-Local-Id }, remoteId: { header: Location, pattern: /a/b } }"))
                == "queue.routes[0].creates.remoteId.pattern"
        )
        #expect(
            errorKey(route("{ localId: { header: \"X Local\" }, remoteId: { json: /id } }"))
                == "queue.routes[0].creates.localId.header"
        )
        #expect(errorKey(route("{ localId: { header: X-Local-Id }, remoteId: { json: /id }, other: 1 }")) != nil)
    }
}
