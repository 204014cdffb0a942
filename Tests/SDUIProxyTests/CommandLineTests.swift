import Foundation
import SDUIProxy
import SDUIProxyCore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a new user meets on the command line: `--version`, `--help`, `--print-config`, `health`, and what
/// `--check-config` and start-up refuse.
@Suite("The sdui-proxy command line", .serialized)
struct CommandLineTests {
    struct Finished {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    /// Runs the executable in the repository root with `arguments`, the environment without the proxy's variables
    /// plus `environment`, and both outputs collected; killed if it has not ended within `timeout`.
    static func run(
        _ arguments: [String],
        environment: [String: String] = [:],
        timeout: Duration = .seconds(20)
    ) async throws -> Finished {
        let outputs = NSTemporaryDirectory() + "sdui-cli-" + UUID().uuidString
        defer {
            try? FileManager.default.removeItem(atPath: outputs + ".out")
            try? FileManager.default.removeItem(atPath: outputs + ".err")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputs + ".out", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, outputs + ".err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = commandLineSpawnAddCloseFrom(&actions, 3)
        _ = commandLineSpawnAddChangeDirectory(&actions, ProcessTests.repositoryRoot.path)
        let executable = ProcessTests.executable.path
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = ProcessTests.environment(adding: environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard result == 0 else { throw ChildProcess.SpawnFailed(call: "posix_spawn", code: result) }

        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid { break }
            if reaped < 0 && errno != EINTR { break }
            if ContinuousClock.now > deadline {
                // It should have ended by itself: it must not outlive the test.
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                Issue.record("sdui-proxy \(arguments.joined(separator: " ")) did not end within \(timeout)")
                break
            }
            // Polled by sleeping the task, not the thread: a blocked thread is one of the few the whole suite's
            // asynchronous tests run on, and a child starting slowly would stall every proxy test's client.
            try? await Task.sleep(for: .milliseconds(10))
        }
        let signal = status & 0x7f
        return Finished(
            status: signal == 0 ? (status >> 8) & 0xff : 128 + signal,
            standardOutput: (try? String(contentsOfFile: outputs + ".out", encoding: .utf8)) ?? "",
            standardError: (try? String(contentsOfFile: outputs + ".err", encoding: .utf8)) ?? ""
        )
    }

    /// A file in the temporary directory holding `text`, removed by `body`'s end.
    static func withFile<T>(
        _ text: String,
        suffix: String = ".yaml",
        _ body: (String) async throws -> T
    ) async throws -> T {
        let path = NSTemporaryDirectory() + "sdui-cli-" + UUID().uuidString + suffix
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try await body(path)
    }

    static var samples: String { ProcessTests.repositoryRoot.appendingPathComponent("config/samples").path }

    // MARK: Version and help

    @Test("--version prints the version and nothing else")
    func version() async throws {
        let finished = try await Self.run(["--version"])
        #expect(finished.status == 0)
        #expect(finished.standardOutput == SDUIProxyVersion.current + "\n")
    }

    @Test("--help names the config file's default path, the environment, the signals and the admin listener")
    func help() async throws {
        let finished = try await Self.run(["--help"])
        #expect(finished.status == 0)
        // Help text is wrapped to the terminal's width: compare with the line breaks taken out.
        let text = finished.standardOutput.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for expected in [
            "config/sdui-proxy.yaml, relative to the working directory", "SDUI_PROXY_<KEY_PATH>",
            "the flags override both", "SIGTERM", "SIGINT", "exit 0", "SIGHUP reloads the config file",
            "127.0.0.1:9090", "SDUI_PROXY_ADMIN_TOKEN", "--print-config", "--check-config", "health", "--version",
        ] {
            #expect(text.contains(expected), "\(expected)")
        }
        #expect(text.contains("64 the command line is wrong"))
        let health = try await Self.run(["health", "--help"])
        #expect(health.status == 0)
        #expect(health.standardOutput.contains("--admin-port"))
    }

    @Test("a flag the command does not take, or a malformed value, exits 64 (a usage error)")
    func badFlags() async throws {
        for arguments in [["--no-such-flag"], ["--port", "eighty"], ["health", "--upstream", "file:config/samples"]] {
            let finished = try await Self.run(arguments)
            #expect(finished.status == 64, "\(arguments): \(finished.standardError)")
            #expect(finished.standardOutput.isEmpty)
            #expect(!finished.standardError.isEmpty)
        }
    }

    // MARK: --print-config

    @Test("--print-config prints file, environment and flags as YAML that loads back to the same configuration")
    func printConfigRoundTrip() async throws {
        let yaml = """
            upstream: { url: "file:config/samples", timeout: 3s }
            cache: { defaultTTL: 60s, routes: [{ prefix: /assets/, defaultTTL: 1d }] }
            headers: { X-Api-Key: "k: v", Content-Type: application/json }
            queue: { store: /var/lib/sdui-proxy/queue, routes: [{ match: POST /api/orders }] }
            """
        try await Self.withFile(yaml) { path in
            let environment = ["SDUI_PROXY_LOG_LEVEL": "debug", "SDUI_PROXY_PREFETCH_URLS": "[/screens/home]"]
            let finished = try await Self.run(
                ["--config", path, "--print-config", "--port", "8181", "--admin-port", "9191"],
                environment: environment
            )
            #expect(finished.status == 0, "\(finished.standardError)")
            let expected = try ConfigurationLoader(environment: environment)
                .load(path: path, overrides: CommandLineOverrides(port: 8181, adminPort: 9191))
            let printed = try ConfigurationLoader().load(yaml: finished.standardOutput)
            #expect(printed == expected)
            #expect(printed.listen.port == 8181)
            #expect(printed.admin.port == 9191)
            #expect(printed.log.level == "debug")
            #expect(printed.prefetch.urls == ["/screens/home"])
        }
    }

    @Test("--print-config prints neither the admin token nor the credentials in a URL")
    func printConfigRedacts() async throws {
        let yaml = """
            upstream: { url: "file:config/samples" }
            headers: { X-Callback: "https://svc:hunter2@auth.internal/token" }
            """
        try await Self.withFile(yaml) { path in
            let finished = try await Self.run(
                ["--config", path, "--print-config"],
                environment: ["SDUI_PROXY_ADMIN_TOKEN": "s3cretTok3n", "SDUI_PROXY_ADMIN_HOST": "0.0.0.0"]
            )
            #expect(finished.status == 0, "\(finished.standardError)")
            for secret in ["s3cretTok3n", "hunter2"] {
                #expect(!finished.standardOutput.contains(secret))
                #expect(!finished.standardError.contains(secret))
            }
            #expect(finished.standardOutput.contains("SDUI_PROXY_ADMIN_TOKEN: <redacted>"))
            #expect(finished.standardOutput.contains("https://<redacted>@auth.internal/token"))
            #expect(finished.standardOutput.contains("host: \"0.0.0.0\""))
        }
    }

    @Test("--print-config of a config that does not load exits 2 and prints nothing on standard output")
    func printConfigRefusesBrokenFile() async throws {
        try await Self.withFile("cache: { maxBytes: plenty }\n") { path in
            let finished = try await Self.run(["--config", path, "--print-config"])
            #expect(finished.status == 2)
            #expect(finished.standardOutput.isEmpty)
            #expect(finished.standardError.contains("cache.maxBytes"))
        }
    }

    // MARK: health

    /// A TCP socket bound to a loopback port the kernel picks, listening when asked; the caller closes it.
    static func loopbackSocket(listening: Bool) throws -> (descriptor: Int32, port: Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ready = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
                    && (!listening || listen(descriptor, 8) == 0)
            }
        }
        guard ready else {
            let code = errno
            close(descriptor)
            throw ChildProcess.SpawnFailed(call: listening ? "listen" : "bind", code: code)
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// Finds a loopback port nothing listens on: one the kernel just gave out and took back.
    static func unusedPort() throws -> Int {
        let (descriptor, port) = try loopbackSocket(listening: false)
        close(descriptor)
        return port
    }

    @Test("health exits 0 against a running proxy (admin on 0.0.0.0 with a token), 1 against a non-ok answer")
    func healthOfRunningProxy() async throws {
        let environment = ["SDUI_PROXY_ADMIN_TOKEN": "t0ken", "SDUI_PROXY_ADMIN_HOST": "0.0.0.0"]
        let process = try ChildProcess(
            executable: ProcessTests.executable.path,
            arguments: ["--config", "config/sdui-proxy.yaml", "--port", "0", "--admin-port", "0"],
            directory: ProcessTests.repositoryRoot.path,
            environment: ProcessTests.environment(adding: environment)
        )
        defer {
            process.signal(SIGKILL)
            _ = process.waitUntilExit()
        }
        var ports: (public: Int, admin: Int)?
        let deadline = ContinuousClock.now + .seconds(20)
        while ports == nil, ContinuousClock.now < deadline, process.isRunning {
            ports = Self.ports(in: process.standardError)
            if ports == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let bound = try #require(ports, "the proxy did not start: \(process.standardError)")

        let healthy = try await Self.run(["health", "--admin-port", "\(bound.admin)"], environment: environment)
        #expect(healthy.status == 0, "\(healthy.standardError)")
        #expect(healthy.standardError.isEmpty)

        // The public listener answers /health from the backend: a 404, not the proxy's ok.
        let notAdmin = try await Self.run(["health", "--admin-port", "\(bound.public)"], environment: environment)
        #expect(notAdmin.status == 1)
        #expect(notAdmin.standardError.contains("404"))
        #expect(notAdmin.standardError.split(separator: "\n").count == 1)

        process.signal(SIGTERM)
        #expect(process.waitUntilExit() == 0)
    }

    @Test("health exits 1 with one line on standard error when nothing listens")
    func healthWithNothingListening() async throws {
        let port = try Self.unusedPort()
        let finished = try await Self.run(["health", "--config", "config/sdui-proxy.yaml", "--admin-port", "\(port)"])
        #expect(finished.status == 1)
        let lines = finished.standardError.split(separator: "\n")
        #expect(lines.count == 1)
        #expect(finished.standardError.hasPrefix("sdui-proxy health: "))
        #expect(finished.standardError.contains("127.0.0.1:\(port)"))
        #expect(finished.standardError.contains("refused"))

        let unloadable = try await Self.run(["health", "--config", "/nonexistent/sdui-proxy.yaml"])
        #expect(unloadable.status == 1)
        #expect(unloadable.standardError.contains("/nonexistent/sdui-proxy.yaml"))
    }

    @Test("health gives up after 2 s on a listener that never answers")
    func healthTimesOut() async throws {
        // A listening socket nobody accepts on: the kernel completes the connection, and no answer ever comes.
        let (descriptor, port) = try Self.loopbackSocket(listening: true)
        defer { close(descriptor) }
        let started = ContinuousClock.now
        let finished = try await Self.run(["health", "--admin-port", "\(port)"])
        let elapsed = ContinuousClock.now - started
        #expect(finished.status == 1)
        #expect(finished.standardError == "sdui-proxy health: no answer from 127.0.0.1:\(port): timed out after 2 s\n")
        // Never sooner than its timeout; how much later depends on the machine, and the message says it timed out.
        #expect(elapsed >= .seconds(2))
    }

    private static func ports(in log: String) -> (public: Int, admin: Int)? {
        guard let line = log.split(separator: "\n").first(where: { $0.contains("listening") }) else { return nil }
        func port(after key: String) -> Int? {
            guard let range = line.range(of: key + "=") else { return nil }
            let address = line[range.upperBound...].prefix { $0 != " " }
            return address.split(separator: ":").last.flatMap { Int($0) }
        }
        guard let publicPort = port(after: "public"), let adminPort = port(after: "admin") else { return nil }
        return (publicPort, adminPort)
    }

    // MARK: --check-config and start-up

    /// Runs `--check-config` and a start-up on `yaml`; both must refuse it with status 2 and one line holding
    /// each of `expected`.
    private func expectRefused(_ yaml: String, saying expected: [String]) async throws {
        try await Self.withFile(yaml) { path in
            for arguments in [
                ["--check-config", "--config", path], ["--config", path, "--port", "0", "--admin-port", "0"],
            ] {
                let finished = try await Self.run(arguments)
                #expect(finished.status == 2, "\(arguments): \(finished.standardError)")
                #expect(finished.standardError.split(separator: "\n").count == 1, "\(finished.standardError)")
                for text in expected {
                    #expect(finished.standardError.contains(text), "\(arguments): \(finished.standardError)")
                }
            }
        }
    }

    @Test("a config file that names no upstream.url is refused: the sample screens are no default")
    func noUpstream() async throws {
        try await expectRefused(
            "cache: { defaultTTL: 60s }\n",
            saying: ["upstream.url", "is not set", "SDUI_PROXY_UPSTREAM_URL", "--upstream"]
        )
        try await expectRefused("", saying: ["upstream.url", "is not set"])
        // Named by the environment or a flag instead, it is accepted.
        try await Self.withFile("cache: { defaultTTL: 60s }\n") { path in
            let flagged = try await Self.run(["--check-config", "--config", path, "--upstream", "file:config/samples"])
            #expect(flagged.status == 0, "\(flagged.standardError)")
            let fromEnvironment = try await Self.run(
                ["--check-config", "--config", path],
                environment: ["SDUI_PROXY_UPSTREAM_URL": "file:config/samples"]
            )
            #expect(fromEnvironment.status == 0, "\(fromEnvironment.standardError)")
        }
    }

    @Test("a port in use is said in one line, host and port as configured, and nothing else; exit 1")
    func portInUse() async throws {
        let (descriptor, port) = try Self.loopbackSocket(listening: true)
        defer { close(descriptor) }
        let yaml = """
            listen: { host: 127.0.0.1 }
            upstream: { url: "file:config/samples" }
            """
        try await Self.withFile(yaml) { path in
            let finished = try await Self.run(["--config", path, "--port", "\(port)", "--admin-port", "0"])
            #expect(finished.status == 1)
            #expect(
                finished.standardError == "sdui-proxy: cannot listen on 127.0.0.1:\(port): address already in use\n"
            )
            #expect(finished.standardOutput.isEmpty)
        }
    }

    @Test("a missing config file is named by its absolute path; a YAML syntax error names the file")
    func unreadableFiles() async throws {
        let root =
            ProcessTests.repositoryRoot.path.hasSuffix("/")
            ? String(ProcessTests.repositoryRoot.path.dropLast()) : ProcessTests.repositoryRoot.path
        let name = "no-such-config-\(UUID().uuidString).yaml"
        for arguments in [["--config", name], ["--check-config", "--config", name], ["--config", "./" + name]] {
            let missing = try await Self.run(arguments)
            #expect(missing.status == 2)
            #expect(
                missing.standardError
                    == "sdui-proxy: config error: \(root)/\(name): cannot read the config file (missing or unreadable)\n"
            )
        }
        try await Self.withFile("upstream: { url: \"file:config/samples\"\ncache: [unclosed\n") { path in
            let broken = try await Self.run(["--check-config", "--config", path])
            #expect(broken.status == 2)
            #expect(
                broken.standardError.hasPrefix("sdui-proxy: config error: \(path): not valid YAML"),
                "\(broken.standardError)"
            )
            #expect(broken.standardError.split(separator: "\n").count == 1)
        }
    }

    @Test("a file: upstream directory that does not exist is refused, saying where a relative path resolves")
    func missingUpstreamDirectory() async throws {
        let name = "no-such-directory-\(UUID().uuidString)"
        let root =
            ProcessTests.repositoryRoot.path.hasSuffix("/")
            ? String(ProcessTests.repositoryRoot.path.dropLast()) : ProcessTests.repositoryRoot.path
        try await expectRefused(
            "upstream: { url: \"file:\(name)\" }\n",
            saying: ["upstream.url", "\(root)/\(name) does not exist", "working directory, \(root)"]
        )
    }

    @Test("a file: upstream that is a regular file is refused")
    func upstreamNotADirectory() async throws {
        try await expectRefused(
            "upstream: { url: \"file:Package.swift\" }\n",
            saying: ["upstream.url", "Package.swift is not a directory"]
        )
    }

    @Test("a queue store that cannot be created is refused (its parent is a regular file, which stops root too)")
    func uncreatableQueueStore() async throws {
        try await Self.withFile("not a directory", suffix: ".txt") { file in
            let yaml = """
                upstream: { url: "file:config/samples" }
                queue: { store: "\(file)/queue", routes: [{ match: POST /api/orders }] }
                """
            try await expectRefused(yaml, saying: ["queue.store", "\(file) is not a directory"])
        }
    }

    @Test("the admin binding rule is checked by --check-config too")
    func adminBindingRule() async throws {
        try await expectRefused(
            "upstream: { url: \"file:config/samples\" }\nadmin: { host: 0.0.0.0 }\n",
            saying: ["admin.host", "SDUI_PROXY_ADMIN_TOKEN"]
        )
    }

    @Test("--check-config passes a queue store that does not exist yet, and creates nothing")
    func checkConfigCreatesNothing() async throws {
        let directory = NSTemporaryDirectory() + "sdui-cli-store-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let yaml = """
            upstream: { url: "file:\(Self.samples)" }
            queue: { store: "\(directory)/queue", routes: [{ match: POST /api/orders }] }
            """
        try await Self.withFile(yaml) { path in
            let finished = try await Self.run(["--check-config", "--config", path])
            #expect(finished.status == 0, "\(finished.standardError)")
            #expect(finished.standardOutput.contains("is valid"))
            #expect(!FileManager.default.fileExists(atPath: directory))
        }
    }
}

// glibc's GNU extensions to posix_spawn, which its module map leaves out.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func commandLineSpawnAddCloseFrom(
    _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>,
    _ from: Int32
) -> Int32
@_silgen_name("posix_spawn_file_actions_addchdir_np")
private func commandLineSpawnAddChangeDirectory(
    _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>,
    _ path: UnsafePointer<CChar>
) -> Int32
