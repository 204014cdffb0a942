import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One event loop's side of ``BusyLoopYielding``: told where a client connection has flushed what a turn of the
/// loop read from it (``answersFlushed()``), it decides with its ``BusyLoopYieldPolicy`` whether the loop has kept
/// its core for a window, and if so offers the core with `sched_yield` in a task of its own.
///
/// That task runs behind the tasks already queued, as NIO runs a turn's tasks in the order they came once it has
/// handled every socket that was ready. An HTTP/1.1 connection answers in its read and flushes when the read
/// ends, so the connections read after the one that closed the window are answered before the yield; an HTTP/2
/// connection answers in its streams' tasks and flushes in a task after them, which is where it tells its yielder,
/// so the yield comes after every flush of the turn. Yielding there and then instead, in the middle of the turn,
/// made the connections the turn had still to reach wait for the core with their requests already in: measured
/// alternately, twice, five rounds each, the median p99 of HTTP/1.1 hits at 256 connections was 5.8 and 5.5 ms
/// that way, 3.7 and 5.0 ms with the task. Requests pipelined behind others are handled in tasks too, and may
/// follow the yield.
///
/// `@unchecked Sendable`: it is made off its loop, for a table every loop reads, but its state is only read and
/// changed on its own loop (``answersFlushed()`` and the task it enqueues), which the debug build checks.
final class BusyLoopYielder: @unchecked Sendable {
    private let eventLoop: any EventLoop
    private let counts: BusyLoopYielding.Counts
    private var policy: BusyLoopYieldPolicy
    /// Whether the task that ends the window is enqueued and has not run yet.
    private var windowEndPending = false

    /// Off its core for this long across `sched_yield`, a loop let another thread run; the call alone takes
    /// about a microsecond.
    static let gaveWayThreshold: Int64 = 5_000

    init(eventLoop: any EventLoop, yieldAfter: Int64, counts: BusyLoopYielding.Counts) {
        self.eventLoop = eventLoop
        self.counts = counts
        policy = BusyLoopYieldPolicy(yieldAfter: yieldAfter)
    }

    /// A client connection on this loop has flushed what the turn read from it produced. Within a window this is
    /// one clock reading and a comparison; at its end, the task that judges the window is enqueued, once.
    @inline(__always)
    func answersFlushed() {
        assert(eventLoop.inEventLoop, "a loop's yielder is told of another loop's connection")
        guard !windowEndPending, policy.isDue(now: Int64(NIODeadline.now().uptimeNanoseconds)) else { return }
        windowEndPending = true
        // At most once a window (a few thousand times a second under load): the closure's allocation is nothing
        // beside it, and holding the yielder strongly keeps it alive for a task NIO runs as the loop shuts down.
        eventLoop.execute { self.endWindow() }
    }

    /// Ends the window, and offers the core when the loop's thread ran for most of it.
    private func endWindow() {
        windowEndPending = false
        // The thread's CPU clock (a system call) is read only here, once a window, and twice more around a yield.
        let now = Int64(NIODeadline.now().uptimeNanoseconds)
        let cpuBefore = Self.threadCPUTime()
        guard policy.closeWindow(now: now, cpuTime: cpuBefore) else { return }
        let before = Int64(NIODeadline.now().uptimeNanoseconds)
        sched_yield()
        let after = Int64(NIODeadline.now().uptimeNanoseconds)
        let cpuAfter = Self.threadCPUTime()
        counts.yielded.wrappingAdd(1, ordering: .relaxed)
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
