import NIOCore
import NIOPosix
import SDUIProxyCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The event loop group a ``ProxyServer`` started without one makes for itself: `eventLoops.count` loops, by
/// default one per core the process may use, each yielding its core when it has kept it for
/// `eventLoops.yieldAfter`.
struct ProxyEventLoops: Sendable {
    let group: MultiThreadedEventLoopGroup
    /// Nil when `eventLoops.yieldAfter` is zero.
    let yielding: BusyLoopYielding?

    /// `eventLoops.yieldAfter` as the config file writes it, or `never`, for the start-up log.
    let yieldAfterDescription: String

    init(_ configuration: ProxyConfiguration.EventLoops) {
        yieldAfterDescription =
            configuration.yieldAfter > .zero ? "\(configuration.yieldAfter.timeAmount.nanoseconds / 1000)us" : "never"
        // NIO's count honours the container's CPU quota and cpuset.
        let count = configuration.count > 0 ? configuration.count : System.coreCount
        if configuration.yieldAfter > .zero {
            let yielding = BusyLoopYielding(yieldAfter: configuration.yieldAfter.timeAmount, loops: count)
            self.yielding = yielding
            group = MultiThreadedEventLoopGroup(numberOfThreads: count, metricsDelegate: yielding)
        } else {
            yielding = nil
            group = MultiThreadedEventLoopGroup(numberOfThreads: count)
        }
    }
}

/// Lets the threads waiting for a busy event loop's core run, once the loop has kept that core for
/// `eventLoops.yieldAfter` (``ProxyConfiguration/EventLoops/yieldAfter``).
///
/// Linux takes the core from a thread that never blocks only at its scheduler tick, every 4 ms at 250 Hz. A loop
/// under steady load always finds more sockets ready, so it never blocks, and a thread waiting for the same core
/// (the other loop, a client on the same machine, a sidecar) waits out the tick; every connection on a waiting
/// loop waits with it. That wait was most of the proxy's p99 on a 2-core machine whose clients shared the cores.
///
/// NIO calls ``processedTick(info:)`` on the loop's thread after each turn of the loop, which is where a loop is
/// between batches of work: what it wrote is out, and yielding delays nothing it has started.
final class BusyLoopYielding: NIOEventLoopMetricsDelegate, Sendable {
    /// Each loop's policy.
    private let policies: EventLoopSlots<BusyLoopYieldPolicy>
    private let yieldCalls = Atomic<Int>(0)
    private let gaveWay = Atomic<Int>(0)

    /// For a group of `loops` loops: a loop beyond them never yields.
    init(yieldAfter: TimeAmount, loops: Int) {
        policies = EventLoopSlots(count: loops, initial: BusyLoopYieldPolicy(yieldAfter: yieldAfter.nanoseconds))
    }

    /// How often a loop has offered its core: on a core of its own, nothing takes it.
    var yieldCallCount: Int { yieldCalls.load(ordering: .relaxed) }

    /// How often another thread did run when a loop offered its core (`sdui_event_loop_yields_total`): a count
    /// that climbs says the loops share their cores with other busy threads.
    var yieldCount: Int { gaveWay.load(ordering: .relaxed) }

    /// Off its core for this long across `sched_yield`, a loop let another thread run; the call alone takes
    /// about a microsecond.
    static let gaveWayThreshold: Int64 = 5_000

    func processedTick(info: NIOEventLoopTickInfo) {
        guard let policy = policies.value(of: info.eventLoopID) else { return }
        // The tick's own clock reading decides whether a window is over; the thread's CPU clock (a system call) is
        // read only then, and twice more around a yield.
        let now = Int64(info.endTime.uptimeNanoseconds)
        guard policy.pointee.isDue(now: now) else { return }
        let cpuBefore = Self.threadCPUTime()
        guard policy.pointee.closeWindow(now: now, cpuTime: cpuBefore) else { return }
        let before = Int64(NIODeadline.now().uptimeNanoseconds)
        sched_yield()
        let after = Int64(NIODeadline.now().uptimeNanoseconds)
        let cpuAfter = Self.threadCPUTime()
        yieldCalls.wrappingAdd(1, ordering: .relaxed)
        if (after - before) - (cpuAfter - cpuBefore) >= Self.gaveWayThreshold {
            gaveWay.wrappingAdd(1, ordering: .relaxed)
        }
        // The window starts when the loop has its core back: the time spent waiting for it is not the loop's.
        policy.pointee.startWindow(now: after, cpuTime: cpuAfter)
    }

    /// The calling thread's CPU time, in nanoseconds.
    private static func threadCPUTime() -> Int64 {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}

/// Decides when an event loop has kept its core long enough to let others run: the loop's time is cut into
/// windows of `yieldAfter`, and at the end of each the loop yields if its thread ran for at least three quarters
/// of it. A loop that paused for lack of work, or waited for its core, has already let others run.
struct BusyLoopYieldPolicy {
    let yieldAfter: Int64
    private var windowStart: Int64 = 0
    private var windowCPUStart: Int64 = 0

    init(yieldAfter: Int64) {
        self.yieldAfter = yieldAfter
    }

    /// Whether the window is over, at `now` (monotonic nanoseconds); until then nothing else is asked.
    func isDue(now: Int64) -> Bool {
        now - windowStart >= yieldAfter
    }

    /// Ends the window and starts the next; returns whether the loop should yield: whether the thread ran
    /// (`cpuTime`, its CPU clock) for at least three quarters of the window.
    mutating func closeWindow(now: Int64, cpuTime: Int64) -> Bool {
        let elapsed = now - windowStart
        let ran = cpuTime - windowCPUStart
        startWindow(now: now, cpuTime: cpuTime)
        return ran * 4 >= elapsed * 3
    }

    mutating func startWindow(now: Int64, cpuTime: Int64) {
        windowStart = now
        windowCPUStart = cpuTime
    }
}
