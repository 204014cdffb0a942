import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import PostgresNIO
import SDUIProxy
import SDUIProxyCore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A throwaway PostgreSQL server from the installed binaries: its own data directory in a temporary directory,
/// listening on a free loopback port only, with a superuser that logs in with a password (SCRAM-SHA-256).
///
/// When the tests run as root the server runs as uid and gid 65534 (initdb refuses root). ``stop()`` and
/// ``start()`` take it down and bring it back on the same data and port; ``shutdown()`` stops it and removes the
/// directory, and so does `deinit` if it was not called.
final class PostgresTestServer: Sendable {
    /// The server's `bin` directory (holding `initdb` and `postgres`): the PATH's, else Debian's
    /// `/usr/lib/postgresql/<version>/bin` of the newest version.
    static let binDirectory: String? = {
        let manager = FileManager.default
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates =
            path.split(separator: ":").map(String.init)
            + ((try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
            .map { "/usr/lib/postgresql/\($0)/bin" }
        return candidates.first { access($0 + "/initdb", X_OK) == 0 && access($0 + "/postgres", X_OK) == 0 }
    }()

    /// Whether a server can be started here: the binaries are installed, and, as root, `setpriv` can drop to
    /// an unprivileged user.
    static var isAvailable: Bool { binDirectory != nil && (!ProxyLaunch.isRoot || ProxyLaunch.setpriv != nil) }

    /// The one line a skipped test gives.
    static let unavailableReason: Comment =
        "needs PostgreSQL's initdb and postgres; enable with: apt-get install postgresql"

    /// The server of the running suite (see ``PostgresServerScope``).
    @TaskLocal static var current: PostgresTestServer?

    /// The event loop of every connection the tests make to a test server, their own and the stores' under test:
    /// a loop no test origin or proxy shares, so a login is not queued behind the work of the hundreds of
    /// tests that run beside it.
    static let eventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// How long the tests' own connections (to make a database, to look at rows) may take to log in. They wait
    /// for a server that is known to run, so this only keeps a test from hanging: a machine starting hundreds
    /// of tests at once has kept a login waiting for seconds.
    static let fixtureConnectTimeout: Duration = .seconds(60)

    /// The superuser and its password, in the `postgres` database.
    let url: PostgresURL
    let port: Int
    /// Holds the data directory, the socket directory and the password file.
    private let directory: String
    private let bin: String
    private let reservation: PortReservation
    private let process = NIOLockedValueBox<ChildProcess?>(nil)

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// Makes a cluster with initdb and starts the server on it.
    static func start() async throws -> PostgresTestServer {
        let server = try await PostgresTestServer()
        do {
            try await server.start()
        } catch {
            await server.shutdown()
            throw error
        }
        return server
    }

    private init() async throws {
        guard let bin = Self.binDirectory else { throw Failure("PostgreSQL is not installed") }
        self.bin = bin
        let directory = NSTemporaryDirectory() + "sdui-pg-" + UUID().uuidString
        self.directory = directory
        (port, reservation) = try Self.reserveFreePort()
        let password = "pw-" + UUID().uuidString
        url = PostgresURL(user: "sdui_test", password: password, host: "127.0.0.1", port: port, database: "postgres")

        let manager = FileManager.default
        try manager.createDirectory(atPath: directory + "/sock", withIntermediateDirectories: true)
        try password.write(toFile: directory + "/pwfile", atomically: false, encoding: .utf8)
        if ProxyLaunch.isRoot {
            let id = uid_t(ProxyLaunch.unprivilegedID)
            for path in [directory, directory + "/sock", directory + "/pwfile"] {
                guard chown(path, id, gid_t(id)) == 0 else { throw Failure("chown \(path): errno \(errno)") }
            }
        }
        guard chmod(directory, 0o700) == 0 else { throw Failure("chmod \(directory): errno \(errno)") }

        let initdb = try spawn(
            "initdb",
            [
                "-D", directory + "/data", "-U", url.user, "--pwfile=" + directory + "/pwfile",
                "--auth=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-sync",
            ]
        )
        let status = try await Self.wait(for: initdb, upTo: .seconds(120))
        guard status == 0 else {
            throw Failure("initdb exited with \(status.map(String.init) ?? "a timeout"): \(initdb.standardError)")
        }
    }

    deinit {
        if let running = process.withLockedValue({ $0 }) {
            running.signal(SIGINT)
            _ = running.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Starts the server on its data directory and waits until it accepts a login.
    func start() async throws {
        guard process.withLockedValue({ $0 }) == nil else { throw Failure("the server is running already") }
        let postgres = try spawn(
            "postgres",
            [
                "-D", directory + "/data", "-p", String(port), "-k", directory + "/sock",
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=16MB",
            ]
        )
        process.withLockedValue { $0 = postgres }
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            guard postgres.isRunning else {
                process.withLockedValue { $0 = nil }
                throw Failure("postgres exited at start: \(postgres.standardError)")
            }
            do {
                try await withConnection { connection in
                    try await connection.query("SELECT 1", logger: Self.logger)
                }
                return
            } catch  where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            } catch {
                throw Failure("postgres did not accept a login within 60s: \(PostgresErrorText.describe(error))")
            }
        }
    }

    /// Stops the server (a fast shutdown: sessions are ended, the data is kept) and waits for it to exit.
    func stop() async throws {
        guard let running = process.withLockedValue({ $0 }) else { return }
        running.signal(SIGINT)
        guard try await Self.wait(for: running, upTo: .seconds(60)) != nil else {
            running.signal(SIGKILL)
            _ = running.waitUntilExit()
            process.withLockedValue { $0 = nil }
            throw Failure("postgres did not stop within 60s")
        }
        process.withLockedValue { $0 = nil }
    }

    /// Stops the server and removes its directory.
    func shutdown() async {
        try? await stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A new, empty database and the URL that logs in to it, so tests sharing the server do not share tables.
    func makeDatabase() async throws -> PostgresURL {
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        try await withConnection { connection in
            try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: Self.logger)
        }
        var url = url
        url.database = name
        return url
    }

    /// A client for `url` (the server's by default); the caller runs it (`run()`) for as long as it is used.
    func makeClient(_ url: PostgresURL? = nil, applicationName: String? = nil) -> PostgresClient {
        PostgresClient(
            configuration: PostgresConnectionSettings.clientConfiguration(
                url ?? self.url,
                applicationName: applicationName,
                connectTimeout: Self.fixtureConnectTimeout
            ),
            eventLoopGroup: Self.eventLoopGroup,
            backgroundLogger: Self.logger
        )
    }

    /// Runs `body` with a running client for `url` (the server's by default), and stops the client after.
    @discardableResult
    func withClient<Result: Sendable>(
        _ url: PostgresURL? = nil,
        applicationName: String? = nil,
        _ body: (PostgresClient) async throws -> Result
    ) async throws -> Result {
        let client = makeClient(url, applicationName: applicationName)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }

    /// Runs `body` on a connection of its own to `url` (the server's by default), closed after.
    @discardableResult
    func withConnection<Result: Sendable>(
        _ url: PostgresURL? = nil,
        applicationName: String? = nil,
        _ body: (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let configuration = try PostgresConnectionSettings.connectionConfiguration(
            url ?? self.url,
            applicationName: applicationName,
            connectTimeout: Self.fixtureConnectTimeout
        )
        let connection = try await PostgresConnection.connect(
            on: Self.eventLoopGroup.next(),
            configuration: configuration,
            id: 0,
            logger: Self.logger
        )
        do {
            let result = try await body(connection)
            try? await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Ends every session whose `application_name` is `applicationName`, as if the network dropped them;
    /// returns how many there were.
    @discardableResult
    func terminateConnections(applicationName: String) async throws -> Int {
        try await withConnection { connection in
            // In the select list, pg_terminate_backend runs only on the rows the WHERE clause kept; in the WHERE
            // clause the planner could call it before the other conditions, on this very session too.
            let rows = try await connection.query(
                """
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE application_name = \(applicationName) AND pid <> pg_backend_pid()
                """,
                logger: Self.logger
            )
            var count = 0
            for try await terminated in rows.decode(Bool.self) where terminated { count += 1 }
            return count
        }
    }

    /// Ends the session of the backend with process ID `pid`; whether there was one.
    @discardableResult
    func terminateBackend(pid: Int32) async throws -> Bool {
        try await withConnection { connection in
            let rows = try await connection.query("SELECT pg_terminate_backend(\(pid))", logger: Self.logger)
            var terminated = false
            for try await value in rows.decode(Bool.self) { terminated = value }
            return terminated
        }
    }

    // MARK: Private

    static let logger = Logger(label: "sdui-proxy.tests.postgres") { _ in SwiftLogNoOpLogHandler() }

    /// Runs one of the server's programs, as uid 65534 when this process is root.
    private func spawn(_ program: String, _ arguments: [String]) throws -> ChildProcess {
        let environment = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "LC_ALL": "C"]
        guard ProxyLaunch.isRoot else {
            return try ChildProcess(
                executable: bin + "/" + program,
                arguments: arguments,
                directory: directory,
                environment: environment
            )
        }
        guard let setpriv = ProxyLaunch.setpriv else { throw Failure("setpriv is not installed") }
        let id = String(ProxyLaunch.unprivilegedID)
        return try ChildProcess(
            executable: setpriv,
            arguments: ["--reuid=\(id)", "--regid=\(id)", "--clear-groups", "--", bin + "/" + program] + arguments,
            directory: directory,
            environment: environment
        )
    }

    /// The exit status of `process` once it ends, or nil when it still runs after `timeout`.
    private static func wait(for process: ChildProcess, upTo timeout: Duration) async throws -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            guard ContinuousClock.now < deadline else { return nil }
            try await Task.sleep(for: .milliseconds(20))
        }
        return process.waitUntilExit()
    }

    /// A loopback port nothing listens on, held (bound, not listening) for as long as the server lives, so no
    /// other socket is given it while the server is stopped. PostgreSQL binds it with `SO_REUSEADDR`, which a
    /// bound socket that does not listen lets it do.
    private static func reserveFreePort() throws -> (Int, PortReservation) {
        var lastError: (any Error)?
        for _ in 0..<20 {
            let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard probe >= 0 else { throw Failure("socket: errno \(errno)") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let port: Int = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    guard bind(probe, $0, length) == 0, getsockname(probe, $0, &length) == 0 else { return 0 }
                    return Int(
                        UInt16(
                            bigEndian: $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                                $0.pointee.sin_port
                            }
                        )
                    )
                }
            }
            close(probe)
            guard port != 0 else { throw Failure("bind to an ephemeral port: errno \(errno)") }
            do {
                return (port, try PortReservation(port: port))
            } catch {
                lastError = error
            }
        }
        throw Failure("no free loopback port: \(lastError.map { "\($0)" } ?? "")")
    }
}
