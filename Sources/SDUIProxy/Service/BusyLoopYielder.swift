import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One event loop's side of ``BusyLoopYielding``: told where a connection's reads of a turn of the loop end
/// (``readsEnded()``), it decides with its ``BusyLoopYieldPolicy`` whether the loop has kept its core for a
/// window, and if so offers the core with `sched_yield` in a task of its own.
///
/// That task runs after the turn's I/O, as NIO runs the tasks a turn enqueued once it has handled every socket
/// that was ready: what the turn read has been answered or sent upstream, so yielding delays nothing it has
/// started. Yielding there and then instead, in the middle of the turn, makes the connections the turn has still
/// to reach wait for the core with their requests already in: measured alternately, twice, five rounds each, the
/// median p99 of hits at 256 connections was 5.8 and 5.5 ms that way, 4.4 and 5.0 ms with the task.
///
/// `@unchecked Sendable`: it is made off its loop, for a table every loop reads, but its state is only read and
/// changed on its own loop (``readsEnded()`` and the task it enqueues), which the debug build checks.
final class BusyLoopYielder: @unchecked Sendable {
    private let eventLoop: any EventLoop
    private let counts: BusyLoopYielding.Counts
    private var policy: BusyLoopYieldPolicy
    /// Whether the task that offers the core is enqueued and has not run yet.
    private var offerPending = false
    /// That task, made once: a window's end enqueues it without allocating.
    private var offer: (@Sendable () -> Void)?

    /// Off its core for this long across `sched_yield`, a loop let another thread run; the call alone takes
    /// about a microsecond.
    static let gaveWayThreshold: Int64 = 5_000

    init(eventLoop: any EventLoop, yieldAfter: Int64, counts: BusyLoopYielding.Counts) {
        self.eventLoop = eventLoop
        self.counts = counts
        policy = BusyLoopYieldPolicy(yieldAfter: yieldAfter)
        // Unowned: the yielder holds its task, and lives as long as its group's table.
        offer = { [unowned self] in self.offerCore() }
    }

    /// A connection on this loop has read what the turn had for it. Within a window this is one clock reading and
    /// a comparison; at its end, the task that decides and offers the core is enqueued, once.
    @inline(__always)
    func readsEnded() {
        assert(eventLoop.inEventLoop, "a loop's yielder is told of reads on another loop")
        guard !offerPending, policy.isDue(now: Int64(NIODeadline.now().uptimeNanoseconds)), let offer else { return }
        offerPending = true
        eventLoop.execute(offer)
    }

    /// Ends the window, and offers the core when the loop's thread ran for most of it.
    private func offerCore() {
        offerPending = false
        // The thread's CPU clock (a system call) is read only here, once a window, and twice more around a yield.
        let now = Int64(NIODeadline.now().uptimeNanoseconds)
        let cpuBefore = Self.threadCPUTime()
        guard policy.closeWindow(now: now, cpuTime: cpuBefore) else { return }
        let before = Int64(NIODeadline.now().uptimeNanoseconds)
        sched_yield()
        let after = Int64(NIODeadline.now().uptimeNanoseconds)
        let cpuAfter = Self.threadCPUTime()
        counts.offered.wrappingAdd(1, ordering: .relaxed)
        if (after - before) - (cpuAfter - cpuBefore) >= Self.gaveWayThreshold {
            counts.gaveWay.wrappingAdd(1, ordering: .relaxed)
        }
        // The window starts when the loop has its core back: the time spent waiting for it is not the loop's.
        policy.startWindow(now: after, cpuTime: cpuAfter)
    }

    /// The calling thread's CPU time, in nanoseconds.
    private static func threadCPUTime() -> Int64 {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}
