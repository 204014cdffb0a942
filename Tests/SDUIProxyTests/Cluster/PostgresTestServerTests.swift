import Logging
import PostgresNIO
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The throwaway server the cluster tests stand on, reached through ``PostgresConnectionSettings`` the way the
/// proxy reaches its database.
@Suite(
    "a throwaway PostgreSQL server: login with the URL's password, and sessions ended on demand",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer
)
struct PostgresTestServerTests {
    @Test("a client made from the URL logs in with its password and answers SELECT 1")
    func answersWithThePasswordFromTheURL() async throws {
        let server = try #require(PostgresTestServer.current)
        #expect(server.url.password != nil)
        let (one, user) = try await server.withClient { client in
            var result: (Int32, String) = (0, "")
            for try await row in try await client.query("SELECT 1::int, current_user::text").decode(
                (Int32, String).self
            ) {
                result = row
            }
            return result
        }
        #expect(one == 1)
        #expect(user == server.url.user)
    }

    @Test("a wrong password is refused, and nothing said about it holds the password")
    func aWrongPasswordIsRefused() async throws {
        let server = try #require(PostgresTestServer.current)
        var url = server.url
        let wrong = "not-the-password-7b1e"
        url.password = wrong
        do {
            try await server.withConnection(url) { connection in
                try await connection.query("SELECT 1", logger: PostgresTestServer.logger)
            }
            Issue.record("a login with a wrong password succeeded")
        } catch {
            let texts = [
                PostgresErrorText.describe(error), String(describing: error), String(reflecting: error),
                String(describing: url), String(reflecting: url),
            ]
            for text in texts { #expect(!text.contains(wrong), "\(text)") }
            #expect(PostgresErrorText.describe(error).contains("28P01"))
        }
    }

    @Test("terminating the sessions of an application name closes that connection")
    func terminatesConnectionsByApplicationName() async throws {
        let server = try #require(PostgresTestServer.current)
        let name = "victim-\(UInt32.random(in: 0...UInt32.max))"
        try await server.withConnection(applicationName: name) { connection in
            try await connection.query("SELECT 1", logger: PostgresTestServer.logger)
            #expect(try await server.terminateConnections(applicationName: name) == 1)
            // The server ends the session and closes the socket; the connection sees its channel close.
            let closed = try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask {
                    try? await connection.closeFuture.get()
                    return true
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(20))
                    return false
                }
                defer { group.cancelAll() }
                return try await group.next() ?? false
            }
            #expect(closed)
            #expect(connection.isClosed)
        }
        #expect(try await server.terminateConnections(applicationName: name) == 0)
    }
}

/// Taking the server down and bringing it back, on a server of its own: the other suites' keeps running.
@Suite(
    "a throwaway PostgreSQL server stopped and started again",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .ownPostgresServer
)
struct PostgresTestServerRestartTests {
    @Test("after stop and start on the same port, the data written before is there")
    func stopAndStartKeepTheData() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        try await server.withConnection(url) { connection in
            try await connection.query("CREATE TABLE kept (note text)", logger: PostgresTestServer.logger)
            try await connection.query(
                "INSERT INTO kept VALUES ('before the restart')",
                logger: PostgresTestServer.logger
            )
        }
        try await server.stop()
        await #expect(throws: (any Error).self) {
            try await server.withConnection(url) { _ in }
        }
        try await server.start()
        let notes = try await server.withConnection(url) { connection in
            var notes: [String] = []
            for try await note in try await connection.query("SELECT note FROM kept", logger: PostgresTestServer.logger)
                .decode(String.self)
            {
                notes.append(note)
            }
            return notes
        }
        #expect(notes == ["before the restart"])
    }
}
