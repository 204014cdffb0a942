import Atomics
import NIOPosix
import Prometheus

/// `sdui_upstream_duration_seconds`, the time from sending a request to the backend to its complete response, as
/// each thread counts it: one ``Tally`` a thread (``ThreadTallies``), added up when the metrics are rendered, in the Prometheus text format the registry's own histograms use.
///
/// A registry histogram is one lock and one array of buckets that every event loop takes: each backend response
/// (every miss) took a lock the other loops take too, and about 600 instructions with it. A tally is written by its
/// own thread only, with relaxed atomics, so rendering may read it from any thread.
final class UpstreamDurationHistogram: Sendable {
    static let name = "sdui_upstream_duration_seconds"
    static let help = "Time from sending a request to the backend to its complete response."
    /// The buckets' upper bounds.
    static let bounds = ProxyMetrics.upstreamDurationBuckets

    private let tallies = ThreadTallies<Tally>(slot: threadTally)
    private static let threadTally = ThreadSpecificVariable<ThreadTallies<Tally>.Current>()

    /// Counts one backend response that took `nanoseconds`.
    func record(nanoseconds: Int64) {
        tally().count(nanoseconds: nanoseconds)
    }

    /// The calling thread's tally for this histogram.
    func tally() -> Tally {
        tallies.current { Tally() }
    }

    /// How many threads have counted in this histogram.
    var tallyCount: Int { tallies.all.count }

    /// The histogram's lines: its help and type, its cumulative buckets, `+Inf`, sum and count.
    func render() -> String {
        let tallies = tallies.all
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
