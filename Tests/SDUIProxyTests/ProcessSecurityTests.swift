import Foundation
import NIOCore
import NIOHTTP1
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The process as deployed: unprivileged, with an admin token it must neither log nor let go empty, and a queue
/// store it must not silently replace.
extension ProcessTests {
    /// Runs the proxy to its end, or kills it after `timeout`: a start-up that should have been refused and was
    /// not must not hang the suite. Nil when it had to be killed.
    static func runBounded(
        _ arguments: [String],
        environment: [String: String] = [:],
        timeout: Duration = .seconds(20)
    ) async throws -> Finished? {
        let process = try ChildProcess(
            executable: executable.path,
            arguments: arguments,
            directory: repositoryRoot.path,
            environment: Self.environment(adding: environment)
        )
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            guard ContinuousClock.now < deadline else {
                process.signal(SIGKILL)
                _ = process.waitUntilExit()
                return nil
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let status = process.waitUntilExit()
        return Finished(status: status, standardError: process.standardError)
    }

    @Test(
        "as uid 65534 without capabilities, the proxy accepts connections and fetches from an HTTP backend",
        .enabled(if: ProxyLaunch.isRoot, "dropping to uid 65534 needs root, and the tests do not run as root"),
        .enabled(if: ProxyLaunch.setpriv != nil, "setpriv (util-linux) is not on the PATH")
    )
    func runsUnprivileged() async throws {
        let origin = try await TestOrigin { _ in .component() }
        let unprivileged = try ProxyLaunch.unprivileged(files: [
            "sdui-proxy.yaml": """
            listen: { host: 127.0.0.1 }
            upstream: { url: "\(origin.url)" }
            log: { level: debug }
            """
        ])
        defer { unprivileged.remove() }
        let proxy = try await RunningProxy(
            arguments: ["--config", "sdui-proxy.yaml"],
            launch: unprivileged.launch
        )
        let credentials = ProxyLaunch.credentials(of: proxy.process.processIdentifier)
        #expect(credentials["Uid"] == "65534 65534 65534 65534")
        #expect(credentials["Gid"] == "65534 65534 65534 65534")
        #expect(credentials["Groups"] == "")
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            #expect(credentials[set] == "0000000000000000", "\(set)")
        }

        let base = "http://127.0.0.1:\(proxy.publicPort)"
        // An accepted connection, and a connection to the backend: both set TCP_NODELAY.
        let first = try await Self.get(base + "/screens/home")
        #expect(first.0 == .ok)
        #expect(first.1.first(name: "x-cache") == "MISS")
        #expect(first.2.contains("beagle:screenComponent"))
        #expect(origin.requests(to: "/screens/home").count == 1)
        let second = try await Self.get(base + "/screens/home")
        #expect(second.1.first(name: "x-cache") == "HIT")
        let health = try await Self.get("http://127.0.0.1:\(proxy.adminPort)/health")
        #expect(health.2 == #"{"status":"ok"}"#)

        proxy.signal(SIGTERM)
        #expect(try await proxy.waitForExit() == 0)
        try await origin.stop()
    }

    @Test("at log level debug, the admin token appears in no form in the whole output")
    func tokenNeverLogged() async throws {
        let token = "s3cret-Token_42"
        let origin = try await TestOrigin { _ in .component() }
        let file = NSTemporaryDirectory() + "token-\(UUID().uuidString).yaml"
        defer { try? FileManager.default.removeItem(atPath: file) }
        try "listen: { host: 127.0.0.1 }\nupstream: { url: \"\(origin.url)\" }\nlog: { access: true }\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        let proxy = try await RunningProxy(
            arguments: ["--config", file],
            environment: ["SDUI_PROXY_LOG_LEVEL": "debug", "SDUI_PROXY_ADMIN_TOKEN": token]
        )
        let base = "http://127.0.0.1:\(proxy.publicPort)"
        let admin = "http://127.0.0.1:\(proxy.adminPort)"
        #expect(try await Self.get(base + "/screens/home").0 == .ok)
        #expect(try await Self.get(base + "/screens/home", headers: [("Authorization", "Bearer \(token)")]).0 == .ok)
        #expect(try await Self.get(admin + "/health").0 == .ok)
        #expect(try await Self.get(admin + "/metrics").0 == .unauthorized)
        #expect(try await Self.get(admin + "/metrics", headers: [("Authorization", "Bearer wrong")]).0 == .unauthorized)
        #expect(try await Self.get(admin + "/metrics", headers: [("Authorization", "Bearer \(token)")]).0 == .ok)
        let prefetch = try await Self.get(
            admin + "/prefetch",
            method: .POST,
            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
            body: #"{"urls":["/screens/other"]}"#
        )
        #expect(prefetch.0 != .unauthorized)
        proxy.signal(SIGTERM)
        #expect(try await proxy.waitForExit() == 0)

        let log = proxy.log
        // Debug lines were written, the services' descriptions among them (the admin listener's is given the
        // token's holder): the test saw what it is about.
        #expect(log.contains("[ServiceLifecycle] Starting service"))
        #expect(log.contains("ListenerService(admin, "))
        #expect(TokenForms.leaks(of: token, in: log).isEmpty)
        try await origin.stop()
    }

    @Test("an SDUI_PROXY_ADMIN_TOKEN set but empty or blank ends start-up with status 2 and names the variable")
    func emptyTokenRefused() async throws {
        for value in ["", "  ", "\n"] {
            for arguments in [["--check-config"], ["--port", "0", "--admin-port", "0"]] {
                let finished = try #require(
                    try await Self.runBounded(
                        ["--config", "config/sdui-proxy.yaml"] + arguments,
                        environment: ["SDUI_PROXY_ADMIN_TOKEN": value]
                    ),
                    "the proxy started with an empty token"
                )
                #expect(finished.status == 2)
                #expect(finished.standardError.contains("SDUI_PROXY_ADMIN_TOKEN"))
                #expect(finished.standardError.contains("is set but empty"))
            }
        }
    }

    @Test("a queue store truncated to nothing stops start-up with status 1 and a message that names it")
    func damagedQueueStoreRefused() async throws {
        let directory = NSTemporaryDirectory() + "sdui-damaged-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let store = directory + "/queue.sqlite"
        #expect(FileManager.default.createFile(atPath: store, contents: Data()))
        let config = directory + ".yaml"
        try """
        listen: { host: 127.0.0.1 }
        upstream: { url: "http://127.0.0.1:9" }
        queue:
          store: \(directory)
          routes:
            - { match: POST /api/orders }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: config) }

        let refusal = await #expect(throws: RunningProxy.ProxyDidNotStart.self) {
            let proxy = try await RunningProxy(arguments: ["--config", config])
            proxy.signal(SIGTERM)
            _ = try await proxy.waitForExit()
        }
        #expect(refusal?.status == 1)
        #expect(refusal?.log.contains("the queue store \(store) is empty (0 bytes)") == true, "\(refusal?.log ?? "")")
        #expect(refusal?.log.contains("move it aside") == true)
        #expect(try FileManager.default.attributesOfItem(atPath: store)[.size] as? Int == 0)
    }
}
