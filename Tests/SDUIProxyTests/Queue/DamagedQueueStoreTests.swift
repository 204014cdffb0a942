import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import SQLiteNIO
import Testing

@testable import SDUIProxy

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A store file that exists but no longer holds the queue is refused, named, and left as it is; only a missing
/// file makes a new store.
@Suite struct DamagedQueueStoreTests {
    private func entry(_ id: String) -> QueueEntry {
        QueueEntry(
            id: id,
            route: "POST /api",
            method: .POST,
            target: "/api",
            headers: [:],
            body: ByteBuffer(string: "{}"),
            enqueuedAt: QueueInstant(millisecondsSinceEpoch: 1000),
            nextAttemptAt: QueueInstant(millisecondsSinceEpoch: 1000)
        )
    }

    /// A directory holding a store with one pending write, closed.
    private func storeWithAPendingWrite() async throws -> (directory: String, file: String) {
        let directory = QueueTest.makeDirectory()
        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        try await store.insert(entry("pending"))
        try await store.close()
        return (directory, directory + "/" + SQLiteQueueStore.fileName)
    }

    private func contents(_ file: String) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: file))
    }

    /// Opens the store in `directory`, which must fail; returns the error's message.
    private func refusal(_ directory: String) async -> String? {
        let error = await #expect(throws: QueueStoreError.self) {
            let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
            try await store.close()
        }
        return error?.message
    }

    @Test func aStoreTruncatedToNothingIsRefusedAndLeftEmpty() async throws {
        let (directory, file) = try await storeWithAPendingWrite()
        defer { QueueTest.removeDirectory(directory) }
        #expect(truncate(file, 0) == 0)

        let message = try #require(await refusal(directory))
        #expect(message.contains(file))
        #expect(message.contains("is empty (0 bytes)"))
        #expect(message.contains("Restore it from a backup, or move it aside"))
        // Not replaced by a fresh store, and opening again says the same.
        #expect(try contents(file).isEmpty)
        #expect(await refusal(directory) == message)
    }

    @Test func aStoreOverwrittenWithGarbageIsRefusedAndLeftAsItIs() async throws {
        let (directory, file) = try await storeWithAPendingWrite()
        defer { QueueTest.removeDirectory(directory) }
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
        try garbage.write(to: URL(fileURLWithPath: file))

        let message = try #require(await refusal(directory))
        #expect(message.contains(file))
        #expect(message.contains("is not a readable SQLite database"))
        #expect(message.contains("move it aside"))
        #expect(try contents(file) == garbage)
    }

    @Test func anSQLiteFileWithoutTheQueueTableIsRefusedAndGetsNoTable() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let file = directory + "/" + SQLiteQueueStore.fileName
        let other = try await SQLiteConnection.open(
            storage: .file(path: file),
            threadPool: .singleton,
            logger: QueueTest.logger,
            on: QueueTest.group.any()
        )
        _ = try await other.query("CREATE TABLE something_else (x INTEGER)")
        try await other.close()

        let message = try #require(await refusal(directory))
        #expect(message.contains(file))
        #expect(message.contains("without the queue's table"))

        let check = try await SQLiteConnection.open(
            storage: .file(path: file),
            threadPool: .singleton,
            logger: QueueTest.logger,
            on: QueueTest.group.any()
        )
        let tables = try await check.query("SELECT name FROM sqlite_master WHERE type = 'table'")
        try await check.close()
        #expect(tables.compactMap { $0.column("name")?.string } == ["something_else"])
    }

    @Test func aWriteAheadLogWithoutItsDatabaseIsRefused() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let file = directory + "/" + SQLiteQueueStore.fileName
        try Data("frames of a store that was moved away".utf8).write(to: URL(fileURLWithPath: file + "-wal"))

        let message = try #require(await refusal(directory))
        #expect(message.contains("is missing, but its write-ahead log \(file)-wal is still there"))
        #expect(access(file, F_OK) != 0)
    }

    @Test func aMissingFileMakesANewStoreAndALeftoverOfAnInterruptedCreationIsIgnored() async throws {
        let directory = QueueTest.makeDirectory()
        defer { QueueTest.removeDirectory(directory) }
        let staging = directory + "/" + SQLiteQueueStore.fileName + ".new"
        try Data("half made".utf8).write(to: URL(fileURLWithPath: staging))

        let store = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        try await store.insert(entry("first"))
        #expect(try await store.pendingCount() == 1)
        try await store.close()
        #expect(access(staging, F_OK) != 0)

        let reopened = try await SQLiteQueueStore.open(directory: directory, logger: QueueTest.logger)
        #expect(try await reopened.firstPending(route: "POST /api")?.id == "first")
        try await reopened.close()
    }
}
