import Testing

/// Gives a suite's tests a running ``PostgresTestServer`` as ``PostgresTestServer/current``.
///
/// Suites that only use the server share one per process: starting a server (initdb, then postgres) costs more
/// than a second of CPU, and a machine starting every suite at once would otherwise run one for each of them
/// while hundreds of other tests start beside them. Each test makes its own database, so sharing a server
/// shares nothing else. A suite that stops and starts its server asks for one of its own.
struct PostgresServerScope: SuiteTrait, TestScoping {
    /// Whether the suite has a server of its own (it stops it) or shares the process's.
    var ownServer: Bool

    var isRecursive: Bool { false }

    func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        guard PostgresTestServer.isAvailable else { return try await function() }
        guard ownServer else {
            let server = try await SharedPostgresServer.shared.acquire()
            do {
                try await PostgresTestServer.$current.withValue(server) { try await function() }
            } catch {
                await SharedPostgresServer.shared.release()
                throw error
            }
            await SharedPostgresServer.shared.release()
            return
        }
        let server = try await PostgresTestServer.start()
        do {
            try await PostgresTestServer.$current.withValue(server) { try await function() }
        } catch {
            await server.shutdown()
            throw error
        }
        await server.shutdown()
    }
}

extension Trait where Self == PostgresServerScope {
    /// A PostgreSQL server for the suite, shared with the other suites that only use theirs:
    /// ``PostgresTestServer/current`` in its tests.
    static var postgresServer: Self { Self(ownServer: false) }

    /// A PostgreSQL server of the suite's own, for suites that stop and start it.
    static var ownPostgresServer: Self { Self(ownServer: true) }
}

/// The process's shared ``PostgresTestServer``: started by the first suite that needs it, shut down when the
/// last suite using it is done (so no server outlives the test process).
private actor SharedPostgresServer {
    static let shared = SharedPostgresServer()

    private var users = 0
    private var server: Task<PostgresTestServer, any Error>?

    func acquire() async throws -> PostgresTestServer {
        users += 1
        let starting = server ?? Task { try await PostgresTestServer.start() }
        server = starting
        do {
            return try await starting.value
        } catch {
            // A failed start is not kept: the next suite tries again.
            users -= 1
            if server == starting { server = nil }
            throw error
        }
    }

    func release() async {
        users -= 1
        guard users == 0, let last = server else { return }
        server = nil
        await (try? last.value)?.shutdown()
    }
}
