import Foundation
import SDUIProxy
import SDUIProxyCore
import Testing

@Suite("What start-up refuses short of binding its ports")
struct StartupChecksTests {
    private static func temporary(_ name: String) -> String {
        NSTemporaryDirectory() + "sdui-checks-\(name)-" + UUID().uuidString
    }

    private func problem(_ check: () throws(ConfigurationError) -> Void) -> ConfigurationError? {
        do {
            try check()
            return nil
        } catch {
            return error
        }
    }

    @Test("a shared queue's lease must outlast upstream.timeout; a SQLite store has no such rule")
    func sharedQueueLease() throws {
        var configuration = ProxyConfiguration()
        configuration.upstream.timeout = .seconds(5)
        var queue = QueueConfiguration()
        queue.store = "postgres://sdui:secret-pw@db/sdui"
        queue.leaseTimeout = .seconds(5)
        configuration.queue = queue
        let refusal = problem { () throws(ConfigurationError) in
            try StartupChecks.check(configuration, adminAuthorization: AdminAuthorization(token: nil))
        }
        #expect(refusal?.key == "queue.leaseTimeout")
        #expect(refusal?.problem.contains("upstream.timeout") == true)
        #expect(refusal?.description.contains("secret-pw") == false)

        configuration.queue?.leaseTimeout = .milliseconds(5001)
        #expect(
            problem { () throws(ConfigurationError) in
                try StartupChecks.check(configuration, adminAuthorization: AdminAuthorization(token: nil))
            } == nil
        )
    }

    @Test("a queue store: an existing or creatable directory passes; under or as a regular file it does not")
    func queueStore() throws {
        let directory = Self.temporary("store")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(problem { () throws(ConfigurationError) in try StartupChecks.checkQueueStore(directory) } == nil)
        #expect(
            problem { () throws(ConfigurationError) in try StartupChecks.checkQueueStore(directory + "/a/b") } == nil
        )

        let file = directory + "/plain"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        let asFile = problem { () throws(ConfigurationError) in try StartupChecks.checkQueueStore(file) }
        #expect(asFile?.key == "queue.store")
        #expect(asFile?.problem.contains("\(file) is not a directory") == true)
        let underFile = problem { () throws(ConfigurationError) in try StartupChecks.checkQueueStore(file + "/q/r") }
        #expect(underFile?.problem.contains("cannot create \(file)/q/r: \(file) is not a directory") == true)

        let sqlite = directory + "/bad"
        try FileManager.default.createDirectory(atPath: sqlite + "/queue.sqlite", withIntermediateDirectories: true)
        let notAFile = problem { () throws(ConfigurationError) in try StartupChecks.checkQueueStore(sqlite) }
        #expect(notAFile?.problem.contains("queue.sqlite is not a regular file") == true)
    }

    @Test("limits.requestBufferDirectory: an existing directory passes; a missing one or a file is refused")
    func requestBufferDirectory() throws {
        let directory = Self.temporary("spool")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = ProxyConfiguration()
        configuration.limits.requestBufferDirectory = directory
        let check = { (configuration: ProxyConfiguration) in
            self.problem { () throws(ConfigurationError) in
                try StartupChecks.check(configuration, adminAuthorization: AdminAuthorization(token: nil))
            }
        }
        #expect(check(configuration) == nil)
        configuration.limits.requestBufferDirectory = directory + "/missing"
        let missing = check(configuration)
        #expect(missing?.key == "limits.requestBufferDirectory")
        #expect(missing?.problem.contains("\(directory)/missing does not exist") == true)
        let file = directory + "/plain"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        configuration.limits.requestBufferDirectory = file
        #expect(check(configuration)?.problem.contains("\(file) is not a directory") == true)
    }

    @Test("a relative file: upstream that is missing is named with the working directory it was taken from")
    func relativeUpstream() throws {
        var upstream = ProxyConfiguration.Upstream()
        upstream.url = "file:missing-\(UUID().uuidString)"
        let error = problem { () throws(ConfigurationError) in try StartupChecks.checkUpstream(upstream) }
        let directory = FileManager.default.currentDirectoryPath
        #expect(error?.key == "upstream.url")
        #expect(error?.problem.contains("\(directory)/\(upstream.url.dropFirst(5)) does not exist") == true)
        #expect(error?.problem.contains("working directory, \(directory)") == true)
        upstream.url = "http://127.0.0.1:9"
        #expect(problem { () throws(ConfigurationError) in try StartupChecks.checkUpstream(upstream) } == nil)
    }

    @Test("a listener host that does not resolve is refused")
    func unresolvableHost() {
        var configuration = ProxyConfiguration()
        configuration.upstream.url = "http://127.0.0.1:9"
        configuration.listen.host = "[::]"
        let error = problem { () throws(ConfigurationError) in
            try StartupChecks.check(configuration, adminAuthorization: AdminAuthorization(token: nil))
        }
        #expect(error?.key == "listen.host")
    }

    @Test("ProxyServer.start and a reload refuse a missing file: directory with a ConfigurationError")
    func serverRefuses() async throws {
        var configuration = ProxyHarness.testConfiguration(upstream: "file:/nonexistent-\(UUID().uuidString)")
        await #expect(throws: ConfigurationError.self) {
            _ = try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
        }
        configuration.upstream.url = "http://127.0.0.1:9"
        let server = try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
        var reloaded = configuration
        reloaded.upstream.url = "file:/nonexistent-\(UUID().uuidString)"
        await #expect(throws: ConfigurationError.self) { try await server.reload(reloaded) }
        #expect(server.context.configuration.upstream.url == "http://127.0.0.1:9")
        await server.shutdown(drainTimeout: .seconds(2))
    }

    @Test("upstream.caFile: only for an https:// upstream, readable, and holding certificates")
    func caFile() throws {
        let certificates = try TestCertificates()
        let valid = try certificates.writeAuthority()
        let garbage = Self.temporary("garbage")
        try "not a certificate".write(toFile: garbage, atomically: true, encoding: .utf8)
        defer {
            try? FileManager.default.removeItem(atPath: valid)
            try? FileManager.default.removeItem(atPath: garbage)
        }
        var upstream = ProxyConfiguration.Upstream()
        upstream.url = "https://backend.internal:8443"
        func refusal(_ caFile: String, url: String? = nil) -> ConfigurationError? {
            var checked = upstream
            checked.caFile = caFile
            if let url { checked.url = url }
            return problem { () throws(ConfigurationError) in try StartupChecks.checkUpstream(checked) }
        }
        #expect(refusal(valid) == nil)
        let plain = refusal(valid, url: "http://backend.internal:8080")
        #expect(plain?.key == "upstream.caFile")
        #expect(plain?.problem.contains("https://") == true, "\(String(describing: plain))")
        let missing = refusal(Self.temporary("missing"))
        #expect(missing?.problem.contains("cannot read") == true, "\(String(describing: missing))")
        let notPEM = refusal(garbage)
        #expect(notPEM?.problem.contains("not a PEM file of certificates") == true, "\(String(describing: notPEM))")
    }
}
