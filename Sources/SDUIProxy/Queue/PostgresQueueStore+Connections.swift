import Logging
import PostgresNIO
import SDUIProxyCore
import Synchronization

// Every operation's connection, leased from the client under `queue.postgres` operation timeout.
extension PostgresQueueStore {

    /// Runs `body` on a pooled connection, after bringing the schema up to date once. A connection that does not
    /// come within `operationTimeout` fails the operation; one whose query takes longer is closed (a half-open
    /// connection answers nothing, ever), and the pool opens another.
    @discardableResult
    func withConnection<Result: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> Result
    ) async throws -> Result {
        let limit = settings.operationTimeout
        let logger = self.logger
        let progress = OperationProgress()
        let operation = Task { [self] in
            try await client.withConnection { connection in
                progress.leased.store(true, ordering: .relaxed)
                let watchdog = Task {
                    try await Task.sleep(for: limit)
                    try? await connection.close()
                }
                defer { watchdog.cancel() }
                if !self.migrated.load(ordering: .relaxed) {
                    try await ClusterSchema.migrate(on: connection, logger: logger)
                    self.migrated.store(true, ordering: .relaxed)
                }
                try await self.measureClockOffsetIfOld(on: connection, logger: logger)
                return try await body(connection, logger)
            }
        }
        // Only the wait for a connection is cut short: a statement sent is left to finish (or to the watchdog),
        // since cancelling it could lose the answer of a change that commits anyway.
        let waitForConnection = Task {
            try await Task.sleep(for: limit)
            guard !progress.leased.load(ordering: .relaxed) else { return }
            progress.timedOut.store(true, ordering: .relaxed)
            operation.cancel()
        }
        defer { waitForConnection.cancel() }
        do {
            return try await withTaskCancellationHandler {
                try await operation.value
            } onCancel: {
                if !progress.leased.load(ordering: .relaxed) { operation.cancel() }
            }
        } catch let error as QueueStoreError {
            throw error
        } catch {
            // PostgreSQL's own errors say little when printed; this says what happened, without parameters.
            if progress.timedOut.load(ordering: .relaxed) {
                throw QueueStoreError("the queue's database did not answer within \(limit)")
            }
            throw QueueStoreError("the queue's database: \(PostgresErrorText.describe(error))")
        }
    }

    /// How far one operation got: whether it has its connection, and whether the wait for one ran out.
    private final class OperationProgress: Sendable {
        let leased = Atomic(false)
        let timedOut = Atomic(false)
    }
}
