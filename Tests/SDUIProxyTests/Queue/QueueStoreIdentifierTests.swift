import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// What every queue store does for creates and the writes that name them, in one sequence run against SQLite and
/// PostgreSQL: the local identifier recorded with the create, the creates a write names found in its insert, claims
/// that pass over writes whose creates have no outcome, the merged write stored, and creates kept while a write needs
/// them.
enum QueueStoreIdentifierContract {
    static let create = "POST /api/orders"
    static let items = "PUT /api/orders"
    static let payments = "POST /api/payments"

    static func local(_ text: String) -> LocalIdentifier { LocalIdentifier(text)! }

    static func entry(
        _ id: String,
        route: String,
        target: String,
        body: String? = nil,
        localId: String? = nil
    ) -> QueueEntry {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        let parts = route.split(separator: " ")
        return QueueEntry(
            id: id,
            route: route,
            method: HTTPMethod(rawValue: String(parts[0])),
            target: target,
            headers: headers,
            body: body.map { ByteBuffer(string: $0) },
            enqueuedAt: .now(),
            nextAttemptAt: .now(),
            localId: localId.map(local)
        )
    }

    /// Runs the sequence on `store`, which is empty; `concurrentRoutes` are the routes it claims with `claimDue`.
    static func run(on store: any QueueStore) async throws {
        // A create, then a second create of the same local identifier while the first is pending: refused.
        #expect(
            try await store.insert(entry("c1", route: create, target: "/api/orders", localId: "tmp-7f3a"), naming: [])
                == []
        )
        let conflict = await #expect(throws: LocalIdentifierConflict.self) {
            try await store.insert(entry("c2", route: create, target: "/api/orders", localId: "tmp-7f3a"), naming: [])
        }
        #expect(conflict?.local == local("tmp-7f3a"))
        #expect(try await store.status(id: "c2") == nil)

        // Writes that name it depend on it; a token that only starts like it does not.
        let itemsNames = ["api", "orders", "tmp-7f3a", "items"].map(local)
        #expect(
            try await store.insert(
                entry("d1", route: items, target: "/api/orders/tmp-7f3a/items"),
                naming: itemsNames
            ) == ["c1"]
        )
        #expect(
            try await store.insert(
                entry("d2", route: payments, target: "/api/payments", body: #"{"order":"tmp-7f3a"}"#),
                naming: [local("tmp-7f3a")]
            ) == ["c1"]
        )
        #expect(
            try await store.insert(
                entry("u1", route: payments, target: "/api/payments", body: #"{"order":"tmp-7f3a1"}"#),
                naming: [local("tmp-7f3a1")]
            ) == []
        )
        let waiting = try #require(try await store.status(id: "d1"))
        #expect(waiting.waitsFor == ["c1"])
        #expect(waiting.json.contains(#""waitsFor":["c1"]"#))

        // Nothing that waits for the create is handed out, nor counted as due.
        guard case .waitingForCreates = try await store.claimHead(route: items, at: .now()) else {
            Issue.record("the head that waits for a create was not held back")
            return
        }
        let due = try await store.claimDue(routes: [payments], at: .now(), excluding: [], limit: 10)
        #expect(due.map(\.id) == ["u1"])
        #expect(try await store.earliestAttempt(routes: [payments], excluding: ["u1"]) == nil)

        // The create is delivered with the backend's identifier.
        guard case .claimed(let created) = try await store.claimHead(route: create, at: .now()) else {
            Issue.record("the create was not claimed")
            return
        }
        #expect(created.localId == local("tmp-7f3a"))
        let remote = try #require(RemoteIdentifier("R1"))
        #expect(
            try await store.markDelivered(
                id: "c1",
                status: 201,
                attempts: 1,
                at: .now(),
                awaitingNotification: false,
                remoteId: remote
            )
        )
        let record = try #require(try await store.createRecords(ids: ["c1", "gone"])["c1"])
        #expect(record.local == local("tmp-7f3a"))
        #expect(record.state == .delivered(remote))
        #expect(try await store.identifierRecord(local: local("tmp-7f3a")) == record)
        #expect(try await store.identifierRecord(local: local("tmp-0000")) == nil)
        #expect(try await store.identifierRecords(named: [local("tmp-7f3a"), local("x")]) == [record])
        #expect(try await store.identifierRecords(finishedSince: .now().advanced(by: .seconds(-60))) == [record])
        let createStatus = try #require(try await store.status(id: "c1"))
        #expect(createStatus.json.contains(#""localId":"tmp-7f3a","remoteId":"R1""#))

        // The dependent is handed out now, and once rewritten it is stored so, with no creates left to wait for.
        guard case .claimed(let dependent) = try await store.claimHead(route: items, at: .now()) else {
            Issue.record("the dependent was not claimed after its create's outcome")
            return
        }
        #expect(dependent.dependsOn == ["c1"])
        #expect(
            try await store.rewrite(
                id: "d1",
                target: "/api/orders/R1/items",
                headers: dependent.headers,
                body: dependent.body
            )
        )
        let merged = try #require(try await store.firstPending(route: items))
        #expect(merged.target == "/api/orders/R1/items")
        #expect(merged.dependsOn.isEmpty)

        // A create is kept while a write that names it waits, whatever its age; then it goes.
        let later = QueueInstant.now().advanced(by: .seconds(3600))
        _ = try await store.removeFinished(before: later)
        #expect(try await store.createRecords(ids: ["c1"])["c1"] != nil)
        let claimedPayments = try await store.claimDue(routes: [payments], at: .now(), excluding: ["u1"], limit: 10)
        #expect(claimedPayments.map(\.id) == ["d2"])
        #expect(
            try await store.finish(
                id: "d2",
                outcome: .dependencyFailed,
                lastError: "the create failed",
                status: nil,
                attempts: 0,
                at: .now(),
                awaitingNotification: true,
                identifiers: QueueOutcomeIdentifiers(failedCreate: "c1")
            )
        )
        let failed = try #require(try await store.status(id: "d2"))
        #expect(failed.state == .dependencyFailed)
        #expect(failed.failedCreate == "c1")
        let outcomes = try await store.unnotifiedOutcomes(limit: 10)
        #expect(outcomes.map(\.outcome) == [.dependencyFailed])
        #expect(outcomes.first?.failedCreate == "c1")
        #expect(outcomes.first?.json.contains(#""failedCreate":"c1""#) == true)

        // The same local identifier may be created again once its create has an outcome.
        try await store.insert(entry("c3", route: create, target: "/api/orders", localId: "tmp-7f3a"), naming: [])
        #expect(try await store.identifierRecord(local: local("tmp-7f3a"))?.create == "c3")
    }
}

@Suite("creates and the writes that name them, in the SQLite store")
struct SQLiteQueueStoreIdentifierTests {
    @Test func theSequence() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        do {
            try await QueueStoreIdentifierContract.run(on: store)
            try await store.close()
        } catch {
            try? await store.close()
            throw error
        }
    }
}

@Suite(
    "creates and the writes that name them, in the PostgreSQL store",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer
)
struct PostgresQueueStoreIdentifierTests {
    @Test func theSequence() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        var settings = PostgresQueueStore.Settings(
            owner: QueueClaimRules.owner(replicaName: "a"),
            leaseTimeout: .seconds(30),
            cleanupInterval: .zero
        )
        settings.operationTimeout = .seconds(30)
        settings.concurrentRoutes = [QueueStoreIdentifierContract.payments]
        let store = PostgresQueueStore(
            url: url,
            replicaName: "a",
            settings: settings,
            logger: QueueTest.logger
        )
        do {
            try await QueueStoreIdentifierContract.run(on: store)
            try await store.close()
        } catch {
            try? await store.close()
            throw error
        }
    }
}
