import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

/// The `sdui-proxy` executable itself: exit statuses, signals, and a crash with writes queued.
@Suite("The sdui-proxy process", .serialized)
struct ProcessTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The executable built next to the test bundle.
    static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("sdui-proxy")
    }

    struct Finished {
        var status: Int32
        var standardError: String
    }

    /// This process's environment without the proxy's variables, and with `extra`.
    static func environment(adding extra: [String: String] = [:]) -> [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SDUI_PROXY_") }.merging(extra) { $1 }
    }

    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Finished {
        let process = try ChildProcess(
            executable: executable.path,
            arguments: arguments,
            directory: repositoryRoot.path,
            environment: Self.environment(adding: environment)
        )
        let status = process.waitUntilExit()
        return Finished(status: status, standardError: process.standardError)
    }

    /// A proxy process started on ephemeral ports; its ports are read from its start-up log line.
    final class RunningProxy: Sendable {
        let process: ChildProcess
        let publicPort: Int
        let adminPort: Int

        /// - Parameters:
        ///   - environment: variables to set besides this process's own (whose `SDUI_PROXY_*` are left out).
        ///   - launch: how to start it: by default as this process's user, from the repository.
        init(arguments: [String], environment: [String: String] = [:], launch: ProxyLaunch = .direct) async throws {
            let process = try ChildProcess(
                executable: launch.executable,
                arguments: launch.arguments + arguments + ["--port", "0", "--admin-port", "0"],
                directory: launch.directory,
                environment: ProcessTests.environment(adding: environment)
            )
            self.process = process
            let deadline = ContinuousClock.now + .seconds(20)
            var ports: (Int, Int)?
            while ports == nil, ContinuousClock.now < deadline, process.isRunning {
                ports = Self.ports(in: process.standardError)
                if ports == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            guard let ports else {
                process.signal(SIGTERM)
                // Waits for the end of its standard error too, so the log is whole.
                let status = process.waitUntilExit()
                throw ProxyDidNotStart(log: process.standardError, status: status)
            }
            (publicPort, adminPort) = ports
        }

        var log: String { process.standardError }

        deinit {
            // A test that failed half-way must not leave its proxy running, nor wait for it to drain: SIGKILL.
            process.signal(SIGKILL)
        }

        struct ProxyDidNotStart: Error {
            var log: String
            var status: Int32
        }

        private static func ports(in log: String) -> (Int, Int)? {
            guard let line = log.split(separator: "\n").first(where: { $0.contains("listening") }) else { return nil }
            // Text logs say `public=host:port`, JSON logs `"public":"host:port"`.
            func port(after key: String) -> Int? {
                guard let range = line.range(of: key + "=") ?? line.range(of: "\"" + key + "\":\"") else { return nil }
                let address = line[range.upperBound...].prefix { $0 != " " && $0 != "\"" }
                return address.split(separator: ":").last.flatMap { Int($0) }
            }
            guard let publicPort = port(after: "public"), let adminPort = port(after: "admin") else { return nil }
            return (publicPort, adminPort)
        }

        func signal(_ number: Int32) {
            process.signal(number)
        }

        func waitForExit(timeout: Duration = .seconds(15)) async throws -> Int32 {
            let deadline = ContinuousClock.now + timeout
            while true {
                if let status = process.terminationStatus { return status }
                guard ContinuousClock.now < deadline else {
                    // It did not stop when asked: it must not outlive the test.
                    process.signal(SIGKILL)
                    throw CancellationError()
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// - Parameter timeout: how long the answer may take; nil waits for it as for any event, under the test's own
    ///   time limit (a durable write's answer follows an fsync, which a loaded machine may make slow).
    static func get(
        _ url: String,
        method: HTTPMethod = .GET,
        headers: [(String, String)] = [],
        body: String? = nil,
        timeout: TimeAmount? = .seconds(10)
    ) async throws -> (HTTPResponseStatus, HTTPHeaders, String) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response: HTTPClientResponse
        if let timeout {
            response = try await HTTPClient.shared.execute(request, timeout: timeout)
        } else {
            response = try await HTTPClient.shared.execute(request, deadline: .distantFuture)
        }
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (response.status, response.headers, String(buffer: bytes))
    }

    @Test("--check-config accepts the bundled config")
    func checkConfigValid() throws {
        let finished = try Self.run(["--check-config", "--config", "config/sdui-proxy.yaml"])
        #expect(finished.status == 0)
    }

    @Test("--check-config accepts the fleet's config with the environment its compose file gives it")
    func checkFleetConfigValid() throws {
        let finished = try Self.run(
            ["--check-config", "--config", "Docker/sdui-proxy-fleet.yaml"],
            environment: [
                "SDUI_PROXY_ADMIN_TOKEN": "a-token-long-enough-for-the-check",
                "SDUI_PROXY_CLUSTER_POSTGRES": "postgres://sdui:pw-in-env@postgres:5432/sdui",
                "SDUI_PROXY_QUEUE_STORE": "postgres://sdui:pw-in-env@postgres:5432/sdui",
                "SDUI_PROXY_CLUSTER_REPLICA_NAME": "proxy-1",
            ]
        )
        #expect(finished.status == 0, "\(finished.standardError)")
        #expect(!finished.standardError.contains("pw-in-env"))
    }

    @Test("a broken config ends start-up with status 2 and one line that names the key")
    func checkConfigBroken() throws {
        let file = NSTemporaryDirectory() + "broken-\(UUID().uuidString).yaml"
        try "cache:\n  maxBytes: plenty\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        for arguments in [["--check-config", "--config", file], ["--config", file]] {
            let finished = try Self.run(arguments)
            #expect(finished.status == 2)
            let lines = finished.standardError.split(separator: "\n")
            #expect(lines.count == 1)
            #expect(finished.standardError.contains("cache.maxBytes"))
        }
        let missing = try Self.run(["--config", "/nonexistent/sdui-proxy.yaml"])
        #expect(missing.status == 2)
        #expect(missing.standardError.contains("/nonexistent/sdui-proxy.yaml"))
        let badEnvironment = try Self.run(["--check-config"], environment: ["SDUI_PROXY_LISTEN_PORT": "x"])
        #expect(badEnvironment.status == 2)
        #expect(badEnvironment.standardError.contains("SDUI_PROXY_LISTEN_PORT"))
    }

    @Test("the bundled config serves the sample screens, and SIGTERM stops the proxy with status 0")
    func servesSamplesAndStopsOnSIGTERM() async throws {
        let proxy = try await RunningProxy(arguments: ["--config", "config/sdui-proxy.yaml"])
        let base = "http://127.0.0.1:\(proxy.publicPort)"
        let admin = "http://127.0.0.1:\(proxy.adminPort)"
        try await waitUntil { try await Self.get(admin + "/ready").0 == .ok }
        // Warmed at start-up: the declared home screen, and the screens its shouldPrefetch actions name.
        for path in ["/screens/home", "/screens/products", "/screens/products/2"] {
            let warmed = try await Self.get(base + path, headers: [("beagle-platform", "ANDROID")])
            #expect(warmed.0 == .ok)
            #expect(warmed.1.first(name: "x-cache") == "HIT", "\(path)")
            #expect(warmed.2.contains("beagle:screenComponent"))
        }
        let first = try await Self.get(base + "/screens/products/1")
        #expect(first.1.first(name: "x-cache") == "MISS")
        let second = try await Self.get(base + "/screens/products/1")
        #expect(second.1.first(name: "x-cache") == "HIT")
        let traversal = try await Self.get(base + "/screens/../../Package.swift")
        #expect(traversal.0 == .notFound)
        let health = try await Self.get(admin + "/health")
        #expect(health.2 == #"{"status":"ok"}"#)

        proxy.signal(SIGTERM)
        #expect(try await proxy.waitForExit() == 0)
        #expect(proxy.log.contains("stopped"))
    }

    @Test("SIGHUP applies a new TTL, keeps the cache, and refuses a broken file")
    func reloadOnSIGHUP() async throws {
        // The directory backend dates its files (Last-Modified): heuristic freshness is off, so that only the
        // route's default lifetime decides.
        let file = NSTemporaryDirectory() + "reload-\(UUID().uuidString).yaml"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let samples = Self.repositoryRoot.appendingPathComponent("config/samples").path
        try "upstream: { url: \"file:\(samples)\" }\ncache: { defaultTTL: 0s, heuristic: { max: 0s } }\n".write(
            toFile: file,
            atomically: true,
            encoding: .utf8
        )
        let proxy = try await RunningProxy(arguments: ["--config", file])
        let base = "http://127.0.0.1:\(proxy.publicPort)"
        #expect(try await Self.get(base + "/screens/home").1.first(name: "x-cache") == "BYPASS")

        // The new log level is in force for the new configuration's parts: the store is logged at debug.
        try
            "upstream: { url: \"file:\(samples)\" }\ncache: { defaultTTL: 60s, heuristic: { max: 0s } }\nlog: { level: debug }\n"
            .write(
                toFile: file,
                atomically: true,
                encoding: .utf8
            )
        proxy.signal(SIGHUP)
        try await waitUntil { proxy.log.contains("configuration reloaded") }
        #expect(try await Self.get(base + "/screens/home").1.first(name: "x-cache") == "MISS")
        try await waitUntil { proxy.log.contains("[SDUIProxy] stored") }
        #expect(try await Self.get(base + "/screens/home").1.first(name: "x-cache") == "HIT")

        try "cache: { defaultTTL: forever }\n".write(toFile: file, atomically: true, encoding: .utf8)
        proxy.signal(SIGHUP)
        try await waitUntil { proxy.log.contains("config reload refused") }
        #expect(proxy.log.contains("cache.defaultTTL"))
        #expect(try await Self.get(base + "/screens/home").1.first(name: "x-cache") == "HIT")
        proxy.signal(SIGTERM)
        #expect(try await proxy.waitForExit() == 0)
    }

    @Test("log.format json writes one JSON object per line, with an access line per request")
    func jsonLogs() async throws {
        let file = NSTemporaryDirectory() + "json-\(UUID().uuidString).yaml"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let samples = Self.repositoryRoot.appendingPathComponent("config/samples").path
        try
            "upstream: { url: \"file:\(samples)\" }\ncache: { defaultTTL: 60s, heuristic: { max: 0s } }\nlog: { format: json, access: true }\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        let proxy = try await RunningProxy(arguments: ["--config", file])
        let base = "http://127.0.0.1:\(proxy.publicPort)"
        _ = try await Self.get(
            base + "/screens/home?from=test",
            headers: [("X-Request-Id", "req-42.a"), ("beagle-platform", "android")]
        )
        _ = try await Self.get(
            base + "/screens/home?from=test",
            headers: [("X-Request-Id", "not a token"), ("beagle-platform", "android")]
        )
        try await waitUntil { proxy.log.components(separatedBy: "from=test").count == 3 }
        proxy.signal(SIGTERM)
        #expect(try await proxy.waitForExit() == 0)

        let lines = proxy.log.split(separator: "\n").filter { !$0.isEmpty }
        let objects = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(objects.count == lines.count, "every line is a JSON object")
        let access = try #require(objects.first { ($0["path"] as? String) == "/screens/home?from=test" })
        #expect(access["method"] as? String == "GET")
        #expect(access["status"] as? Int == 200)
        #expect(access["cache"] as? String == "MISS")
        #expect((access["bytes"] as? Int ?? 0) > 0)
        #expect(access["duration_ms"] != nil)
        // The client's sane request id, the platform routed for, and the backend's time as a number.
        #expect(access["request_id"] as? String == "req-42.a")
        #expect(access["platform"] as? String == "ANDROID")
        #expect(access["upstream_ms"] is NSNumber, "\(access)")
        #expect(access["protocol"] as? String == "http/1.1")
        #expect(access["client"] as? String == "127.0.0.1")
        // A hit asked nothing of the backend; an id that is not a token is replaced by one made for the line.
        let hit = try #require(objects.last { ($0["path"] as? String) == "/screens/home?from=test" })
        #expect(hit["cache"] as? String == "HIT")
        #expect(hit["upstream_ms"] == nil)
        let made = hit["request_id"] as? String ?? ""
        #expect(made.utf8.count == 32 && made.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) })
    }

    @Test("writes queued before a kill -9 are all delivered after a restart, in order, none twice")
    func crashWithQueuedWrites() async throws {
        let directory = NSTemporaryDirectory() + "sdui-crash-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let origin = try await TestOrigin { _ in TestOrigin.Response(status: .created, headers: [], body: "") }
        try await origin.stop()
        let config = directory + ".yaml"
        try """
        upstream: { url: "\(origin.url)", timeout: 5s }
        queue:
          store: \(directory)
          routes:
            - { match: POST /api/orders, ordering: sequential, retry: { maxAttempts: 50, backoff: 50ms, maxBackoff: 200ms } }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: config) }

        let first = try await RunningProxy(arguments: ["--config", config])
        var ids: [String] = []
        for number in 1...5 {
            let reply = try await Self.get(
                "http://127.0.0.1:\(first.publicPort)/api/orders",
                method: .POST,
                body: #"{"n":\#(number)}"#
            )
            #expect(reply.0 == .accepted)
            ids.append(String(reply.1.first(name: "location")?.dropFirst(RequestRouter.queueStatusPrefix.count) ?? ""))
        }
        first.signal(SIGKILL)
        _ = try await first.waitForExit()

        try await origin.restart()
        let second = try await RunningProxy(arguments: ["--config", config])
        try await waitUntil(timeout: .seconds(15)) { origin.requests(to: "/api/orders").count >= 5 }
        // A request leaves the queue only once an attempt got its answer: with none pending, none can come again.
        let admin = "http://127.0.0.1:\(second.adminPort)"
        try await waitUntil { try await Self.get(admin + "/queue").2.contains(#""depth":0"#) }
        let delivered = origin.requests(to: "/api/orders")
        #expect(delivered.map { String(buffer: $0.body) } == (1...5).map { #"{"n":\#($0)}"# })
        #expect(delivered.compactMap { $0.headers.first(name: "idempotency-key") } == ids)
        second.signal(SIGTERM)
        #expect(try await second.waitForExit() == 0)
        try await origin.stop()
    }

    @Test("a second proxy on a queue store in use does not start, and names the process that has it")
    func queueStoreInUse() async throws {
        let directory = NSTemporaryDirectory() + "sdui-locked-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + ".yaml"
        try """
        upstream: { url: "http://127.0.0.1:9" }
        queue:
          store: \(directory)
          routes:
            - { match: POST /api/orders }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: config) }

        let first = try await RunningProxy(arguments: ["--config", config])
        let refusal = await #expect(throws: RunningProxy.ProxyDidNotStart.self) {
            let second = try await RunningProxy(arguments: ["--config", config])
            second.signal(SIGTERM)
            _ = try await second.waitForExit()
        }
        #expect(refusal?.status == 1)
        #expect(refusal?.log.contains("is in use by another process (pid \(first.process.processIdentifier))") == true)
        first.signal(SIGTERM)
        #expect(try await first.waitForExit() == 0)

        // Once the first has stopped, the store is free again.
        let third = try await RunningProxy(arguments: ["--config", config])
        third.signal(SIGTERM)
        #expect(try await third.waitForExit() == 0)
    }
}
