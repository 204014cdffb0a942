import Atomics
import NIOPosix
import Prometheus
import Synchronization

/// `sdui_upstream_duration_seconds`, the time from sending a request to the backend to its complete response, as
/// each thread counts it: one ``Tally`` a thread, found by a thread-specific slot, added up when the metrics are
/// rendered, in the Prometheus text format the registry's own histograms use.
///
/// A registry histogram is one lock and one array of buckets that every event loop takes and copies on write:
/// each backend response (every miss) took a lock the other loops take too and spent about 600 instructions in it.
/// A tally is written by its own thread only, with relaxed atomics, so rendering may read it from any thread.
final class UpstreamDurationHistogram: Sendable {
    static let name = "sdui_upstream_duration_seconds"
    static let help = "Time from sending a request to the backend to its complete response."
    /// The buckets' upper bounds.
    static let bounds = ProxyMetrics.upstreamDurationBuckets

    /// Every thread's tally, for ``render()``: a thread adds its own at its first backend response.
    private let tallies = Mutex<[Tally]>([])
    /// Which histogram a thread's tally counts for: another histogram (another `ProxyMetrics`) recording on the
    /// same thread makes a tally of its own, and the one it replaces in the slot stays in its histogram's list.
    private let generation = UpstreamDurationHistogram.generations.wrappingAdd(1, ordering: .relaxed).newValue
    private static let generations = Atomic<UInt64>(0)
    /// One slot for the process, whatever the histograms: a thread-specific key is a system resource.
    private static let threadTally = ThreadSpecificVariable<ThreadTally>()

    /// Counts one backend response that took `nanoseconds`.
    func record(nanoseconds: Int64) {
        tally().count(nanoseconds: nanoseconds)
    }

    /// The calling thread's tally for this histogram.
    func tally() -> Tally {
        if let current = Self.threadTally.currentValue, current.generation == generation { return current.tally }
        let tally = Tally()
        Self.threadTally.currentValue = ThreadTally(generation: generation, tally: tally)
        tallies.withLock { $0.append(tally) }
        return tally
    }

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
        let count = total(Tally.countSlot)
        text += "\(Self.name)_bucket{le=\"+Inf\"} \(count)\n"
        text += "\(Self.name)_sum \(Duration.nanoseconds(total(Tally.sumSlot)).bucketRepresentation)\n"
        text += "\(Self.name)_count \(count)\n"
        return text
    }

    /// One thread's counts: one per bucket (each duration in the first bucket that holds it; rendering adds them up
    /// into Prometheus's cumulative buckets), the count of every duration (the `+Inf` bucket), and their sum in
    /// nanoseconds (292 years of backend time before it wraps).
    final class Tally: @unchecked Sendable {
        static let firstBucketSlot = 0
        static var countSlot: Int { firstBucketSlot + UpstreamDurationHistogram.bounds.count }
        static var sumSlot: Int { countSlot + 1 }
        static var slotCount: Int { sumSlot + 1 }

        /// Only reached through `UnsafeAtomic`, which is what makes sharing the class across threads sound.
        private let counts: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>

        init() {
            counts = UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>.allocate(capacity: Self.slotCount)
            counts.initialize(repeating: UnsafeAtomic<Int>.Storage(0), count: Self.slotCount)
        }

        deinit {
            counts.deinitialize(count: Self.slotCount)
            counts.deallocate()
        }

        func count(nanoseconds: Int64) {
            if let bucket = ProxyMetrics.upstreamDurationBucketNanoseconds.firstIndex(where: { nanoseconds <= $0 }) {
                UnsafeAtomic<Int>(at: counts + Self.firstBucketSlot + bucket).wrappingIncrement(ordering: .relaxed)
            }
            UnsafeAtomic<Int>(at: counts + Self.countSlot).wrappingIncrement(ordering: .relaxed)
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
