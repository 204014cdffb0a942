import NIOCore
import NIOPosix
import Synchronization

/// The threads that compress large responses after they are stored, off the event loops.
///
/// Its own, not the pool of ``ProxyServer`` that the write queue's database and the file backend use: a burst of
/// large fills must not make a queued write wait, nor the reverse. Bounded twice: a few threads (half the cores,
/// so the loops keep theirs), and a few jobs waiting for them. A fill that finds the queue full is not compressed
/// at all: its entry stays in identity, which is correct, only larger on the wire, and the skip is counted. Work
/// that waits behind a backlog would only finish after many of its entries had been requested in identity.
public final class CompressionPool: Sendable {
    private let threads: NIOThreadPool
    /// Jobs submitted and not yet finished.
    private let unfinished = Atomic<Int>(0)
    /// Jobs refused because ``maximumUnfinished`` were unfinished.
    private let refused = Atomic<Int>(0)
    /// The most jobs submitted and not yet finished.
    public let maximumUnfinished: Int

    /// - Parameters:
    ///   - numberOfThreads: at least 1; by default half the cores.
    ///   - maximumUnfinished: the most jobs running or waiting.
    public init(numberOfThreads: Int = max(1, System.coreCount / 2), maximumUnfinished: Int = 64) {
        threads = NIOThreadPool(numberOfThreads: max(1, numberOfThreads))
        self.maximumUnfinished = max(1, maximumUnfinished)
    }

    public func start() {
        threads.start()
    }

    /// Waits for the jobs running, and drops those waiting: an entry left uncompressed is still whole.
    public func shutdownGracefully() async throws {
        try await threads.shutdownGracefully()
    }

    /// Jobs refused so far because the pool was full.
    public var refusedJobs: Int { refused.load(ordering: .relaxed) }

    /// Runs `work` on the pool, then `finished` with its result, or with nil when the pool shut down before `work`
    /// got a thread (it did not run). Nothing comes back to the caller's loop, so a job costs the loop no future, no
    /// callbacks and no wake-up when it ends: `finished` runs on the pool's thread after `work`, or, for a job that
    /// never runs, wherever the pool drops it (the caller's thread when the pool is not running, a shutdown's
    /// thread for one still waiting). Returns false, and runs neither, when ``maximumUnfinished`` jobs are
    /// unfinished.
    public func submit<Value>(
        _ work: @escaping @Sendable () -> Value,
        finished: @escaping @Sendable (Value?) -> Void
    ) -> Bool {
        guard unfinished.add(1, ordering: .relaxed).newValue <= maximumUnfinished else {
            unfinished.subtract(1, ordering: .relaxed)
            refused.add(1, ordering: .relaxed)
            return false
        }
        threads.submit { [self] state in
            let value: Value? = state == .active ? work() : nil
            // Counted out before anyone hears of the end, so that whoever waited for it finds the room.
            unfinished.subtract(1, ordering: .relaxed)
            finished(value)
        }
        return true
    }
}
