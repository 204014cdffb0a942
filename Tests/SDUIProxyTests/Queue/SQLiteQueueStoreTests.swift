import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import SQLiteNIO
import Testing

@testable import SDUIProxy

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The SQLite store on a real file: what goes in comes out, in order, and survives reopening.
@Suite struct SQLiteQueueStoreTests {
    private func entry(_ id: String, route: String = "POST /api", at time: Int64, body: ByteBuffer? = nil) -> QueueEntry
    {
        QueueTest.entry(id, route: route, at: QueueInstant(millisecondsSinceEpoch: time), body: body)
    }

    @Test func entriesRoundTripAndKeepArrivalOrderAcrossReopening() async throws {
        let directory = QueueTest.makeDirectory() + "/nested/store"
        defer {
            QueueTest.removeDirectory(directory)
            QueueTest.removeDirectory(String(directory.dropLast("/store".count)))
            QueueTest.removeDirectory(String(directory.dropLast("/nested/store".count)))
        }
        let body = ByteBuffer(bytes: [0, 1, 2, 255, 10, 13])
        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        // Later entries get earlier timestamps: order is arrival, not time.
        try await store.insert(entry("b", at: 3000, body: body))
        try await store.insert(entry("a", at: 2000))
        try await store.insert(entry("c", route: "POST /other", at: 1000))
        try await store.close()

        let reopened = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        let first = try await reopened.firstPending(route: "POST /api")
        #expect(first?.id == "b")
        #expect(first?.body == body)
        #expect(first?.target == "/api/b?q=1")
        #expect(first?.method == .POST)
        #expect(first?.headers[canonicalForm: "X-Tag"] == ["a", "b"])
        #expect(first?.headers.first(name: "X-Empty") == "")
        #expect(first?.enqueuedAt == QueueInstant(millisecondsSinceEpoch: 3000))
        #expect(try await reopened.pendingCount() == 3)
        #expect(
            try await reopened.depths() == [
                QueueRouteDepth(
                    route: "POST /api",
                    depth: 2,
                    oldestEnqueuedAt: QueueInstant(millisecondsSinceEpoch: 2000)
                ),
                QueueRouteDepth(
                    route: "POST /other",
                    depth: 1,
                    oldestEnqueuedAt: QueueInstant(millisecondsSinceEpoch: 1000)
                ),
            ]
        )

        let now = QueueInstant(millisecondsSinceEpoch: 5000)
        let due = try await reopened.claimDue(
            routes: ["POST /api", "POST /other"],
            at: now,
            excluding: ["b"],
            limit: 10
        )
        #expect(due.map(\.id) == ["a", "c"])
        #expect(
            try await reopened.claimDue(routes: ["POST /api"], at: now, excluding: [], limit: 1).map(\.id) == ["b"]
        )

        try await reopened.recordAttempt(
            id: "b",
            attempts: 1,
            nextAttemptAt: QueueInstant(millisecondsSinceEpoch: 9000),
            lastError: "the backend answered 503",
            status: 503
        )
        #expect(
            try await reopened.claimDue(routes: ["POST /api"], at: now, excluding: [], limit: 10).map(\.id) == ["a"]
        )
        #expect(
            try await reopened.earliestAttempt(routes: ["POST /api"], excluding: ["a"])
                == QueueInstant(millisecondsSinceEpoch: 9000)
        )
        // The head of a sequential route stays the head while it backs off.
        #expect(try await reopened.firstPending(route: "POST /api")?.id == "b")

        #expect(
            try await reopened.markDelivered(id: "b", status: 201, attempts: 2, at: now, awaitingNotification: false)
        )
        #expect(
            try await reopened.markDelivered(id: "b", status: 201, attempts: 2, at: now, awaitingNotification: false)
                == false
        )
        #expect(
            try await reopened.markFailed(
                id: "b",
                lastError: "x",
                status: nil,
                attempts: 3,
                at: now,
                awaitingNotification: false
            ) == false
        )
        let delivered = try await reopened.status(id: "b")
        #expect(delivered?.state == .delivered)
        #expect(delivered?.status == 201)
        #expect(delivered?.attempts == 2)
        #expect(delivered?.finishedAt == now)
        #expect(delivered?.nextAttemptAt == nil)
        #expect(try await reopened.firstPending(route: "POST /api")?.id == "a")

        #expect(
            try await reopened.markFailed(
                id: "a",
                lastError: "gave up",
                status: 400,
                attempts: 1,
                at: now,
                awaitingNotification: false
            )
        )
        let failed = try await reopened.status(id: "a")
        #expect(failed?.state == .failed)
        #expect(failed?.lastError == "gave up")
        #expect(try await reopened.status(id: "missing") == nil)
        #expect(try await reopened.pendingCount() == 1)

        #expect(try await reopened.removeFinished(before: QueueInstant(millisecondsSinceEpoch: 4000)) == 0)
        #expect(try await reopened.removeFinished(before: QueueInstant(millisecondsSinceEpoch: 6000)) == 2)
        #expect(try await reopened.status(id: "a") == nil)
        #expect(try await reopened.status(id: "c")?.state == .pending)
        try await reopened.close()
    }

    @Test func theDatabaseRunsInWALModeWithFullSync() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        try await store.insert(entry("x", at: 1))
        #expect(store.path == directory + "/queue.sqlite")
        // WAL mode leaves its log file next to the database while a connection is open.
        #expect(access(directory + "/queue.sqlite-wal", F_OK) == 0)
        #expect(try await store.pragma("journal_mode") == "wal")
        #expect(try await store.pragma("synchronous") == "2")  // FULL
        try await store.close()
    }

    @Test func aSecondStoreOverTheSameDirectoryInThisProcessIsRefusedUntilTheFirstCloses() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let first = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        let refusal = await #expect(throws: QueueStoreError.self) {
            let second = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
            try await second.close()
        }
        #expect(refusal?.message.contains("is already open in this process") == true)
        try await first.close()
        let second = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        try await second.close()
    }

    @Test func outcomesAwaitingNotificationAreListedUntilMarkedAcrossReopening() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        for id in ["quiet", "heard", "refused"] { try await store.insert(entry(id, at: 1000)) }
        let now = QueueInstant(millisecondsSinceEpoch: 5000)
        #expect(
            try await store.markDelivered(id: "quiet", status: 200, attempts: 1, at: now, awaitingNotification: false)
        )
        #expect(
            try await store.markDelivered(id: "heard", status: 201, attempts: 2, at: now, awaitingNotification: true)
        )
        #expect(
            try await store.markFailed(
                id: "refused",
                lastError: "the backend answered 422",
                status: 422,
                attempts: 1,
                at: now.advanced(by: .seconds(1)),
                awaitingNotification: true
            )
        )
        try await store.close()

        let reopened = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        #expect(
            try await reopened.unnotifiedOutcomes(limit: 10) == [
                QueueOutcomeEvent(id: "heard", route: "POST /api", outcome: .delivered, status: 201, attempts: 2),
                QueueOutcomeEvent(
                    id: "refused",
                    route: "POST /api",
                    outcome: .failed,
                    status: 422,
                    attempts: 1,
                    error: "the backend answered 422"
                ),
            ]
        )
        #expect(try await reopened.unnotifiedOutcomes(limit: 1).map(\.id) == ["heard"])
        try await reopened.markNotified(id: "heard")
        #expect(try await reopened.unnotifiedOutcomes(limit: 10).map(\.id) == ["refused"])
        try await reopened.close()
    }

    @Test func aStoreFromBeforeNotificationsWereKeptIsBroughtUpToDate() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        // The table as the first versions made it, with one pending entry.
        let old = try await SQLiteConnection.open(
            storage: .file(path: directory + "/" + SQLiteQueueStore.fileName),
            threadPool: .singleton,
            logger: QueueTest.logger,
            on: QueueTest.group.any()
        )
        _ = try await old.query(
            """
            CREATE TABLE queued_requests (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, route TEXT NOT NULL,
                method TEXT NOT NULL, target TEXT NOT NULL, headers BLOB, body BLOB, enqueued_at INTEGER NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')), attempts INTEGER NOT NULL,
                next_attempt_at INTEGER NOT NULL, last_error TEXT, status INTEGER, finished_at INTEGER
            )
            """
        )
        _ = try await old.query(
            """
            INSERT INTO queued_requests (id, route, method, target, enqueued_at, state, attempts, next_attempt_at)
            VALUES ('kept', 'POST /api', 'POST', '/api/kept', 1000, 'pending', 0, 1000)
            """
        )
        try await old.close()

        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        #expect(try await store.firstPending(route: "POST /api")?.id == "kept")
        #expect(try await store.unnotifiedOutcomes(limit: 10).isEmpty)
        let now = QueueInstant(millisecondsSinceEpoch: 2000)
        #expect(
            try await store.markDelivered(id: "kept", status: 200, attempts: 1, at: now, awaitingNotification: true)
        )
        #expect(try await store.unnotifiedOutcomes(limit: 10).map(\.id) == ["kept"])
        try await store.close()
    }
}
