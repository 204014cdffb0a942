import Atomics
import NIOPosix
import Prometheus
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `sdui_upstream_duration_seconds`, the time from sending a request to the backend to its complete response, as
/// each thread counts it: one ``Tally`` a thread, found by a thread-specific slot, added up when the metrics are
/// rendered, in the Prometheus text format the registry's own histograms use.
///
/// A registry histogram is one lock and one array of buckets that every event loop takes: each backend response
/// (every miss) took a lock the other loops take too, and about 600 instructions with it. A tally is written by its
/// own thread only, with relaxed atomics, so rendering may read it from any thread.
final class UpstreamDurationHistogram: Sendable {
    static let name = "sdui_upstream_duration_seconds"
    static let help = "Time from sending a request to the backend to its complete response."
    /// The buckets' upper bounds.
    static let bounds = ProxyMetrics.upstreamDurationBuckets

    /// Every thread's tally, for ``render()``: a thread adds its own at its first backend response.
    private let tallies = Mutex<[Tally]>([])
    /// Which histogram the tally in a thread's slot counts for.
    private let generation = UpstreamDurationHistogram.generations.wrappingAdd(1, ordering: .relaxed).newValue
    private static let generations = Atomic<UInt64>(0)
    /// One slot for the process, whatever the histograms: a thread-specific key is a system resource.
    private static let threadTally = ThreadSpecificVariable<ThreadTally>()

    /// Counts one backend response that took `nanoseconds`.
    func record(nanoseconds: Int64) {
        tally().count(nanoseconds: nanoseconds)
    }

    /// The calling thread's tally for this histogram: the one in its slot, or, when another histogram's is there
    /// (two `ProxyMetrics` recording on one thread, as two proxies sharing an event loop group do), the one it made
    /// before, found in the list, so that taking turns makes no tally more.
    func tally() -> Tally {
        if let current = Self.threadTally.currentValue, current.generation == generation { return current.tally }
        let thread = pthread_self()
        let tally = tallies.withLock { tallies in
            if let made = tallies.first(where: { pthread_equal($0.thread, thread) != 0 }) { return made }
            let tally = Tally(thread: thread)
            tallies.append(tally)
            return tally
        }
        Self.threadTally.currentValue = ThreadTally(generation: generation, tally: tally)
        return tally
    }

    /// How many threads have counted in this histogram.
    var tallyCount: Int { tallies.withLock { $0.count } }

    /// The histogram's lines: its help and type, its cumulative buckets, `+Inf`, sum and count.
    func render() -> String {
        let tallies = tallies.withLock { $0 }
        func total(_ slot: Int) -> Int { tallies.reduce(0) { $0 + $1.count(inSlot: slot) } }
        var text = "# HELP \(Self.name) \(Self.help)\n# TYPE \(Self.name) histogram\n"
        var cumulative = 0
        for (index, bound) in Self.bounds.enumerated() {
            cumulative += total(Tally.firstBucketSlot + index)
            text += "\(Self.name)_bucket{le=\"\(bound.bucketRepresentation)\"} \(cumulative)\n"
        }
        // The count is the buckets' own total, with the durations past the last bound: a count kept apart could be
        // read before a thread added the duration it had put in a bucket, and fall below that bucket.
        let count = cumulative + total(Tally.overflowSlot)
        text += "\(Self.name)_bucket{le=\"+Inf\"} \(count)\n"
        text += "\(Self.name)_sum \(Duration.nanoseconds(total(Tally.sumSlot)).bucketRepresentation)\n"
        text += "\(Self.name)_count \(count)\n"
        return text
    }

    /// One thread's counts: one per bucket (each duration in the first bucket that holds it; rendering adds them up
    /// into Prometheus's cumulative buckets), one for the durations past the last bound, and their sum in
    /// nanoseconds (292 years of backend time before it wraps). The sum is added last, so a rendering may find it a
    /// duration behind the buckets, which Prometheus allows.
    final class Tally: @unchecked Sendable {
        static let firstBucketSlot = 0
        static var overflowSlot: Int { firstBucketSlot + UpstreamDurationHistogram.bounds.count }
        static var sumSlot: Int { overflowSlot + 1 }
        static var slotCount: Int { sumSlot + 1 }

        /// The thread that counts in it.
        let thread: pthread_t
        /// Only reached through `UnsafeAtomic`, which is what makes sharing the class across threads sound.
        private let counts: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>

        init(thread: pthread_t) {
            self.thread = thread
            counts = UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>.allocate(capacity: Self.slotCount)
            counts.initialize(repeating: UnsafeAtomic<Int>.Storage(0), count: Self.slotCount)
        }

        deinit {
            counts.deinitialize(count: Self.slotCount)
            counts.deallocate()
        }

        func count(nanoseconds: Int64) {
            let bounds = ProxyMetrics.upstreamDurationBucketNanoseconds
            let slot =
                bounds.firstIndex(where: { nanoseconds <= $0 }).map { Self.firstBucketSlot + $0 } ?? Self.overflowSlot
            UnsafeAtomic<Int>(at: counts + slot).wrappingIncrement(ordering: .relaxed)
            UnsafeAtomic<Int>(at: counts + Self.sumSlot).wrappingIncrement(by: Int(nanoseconds), ordering: .relaxed)
        }

        func count(inSlot slot: Int) -> Int {
            UnsafeAtomic<Int>(at: counts + slot).load(ordering: .relaxed)
        }
    }
}

/// A thread's tally and the histogram it counts for: `@unchecked Sendable` only so that the thread-specific slot
/// holding it is; only its thread reads it.
private final class ThreadTally: @unchecked Sendable {
    let generation: UInt64
    let tally: UpstreamDurationHistogram.Tally

    init(generation: UInt64, tally: UpstreamDurationHistogram.Tally) {
        self.generation = generation
        self.tally = tally
    }
}
