import Atomics
import NIOCore
import SDUIProxyCore

/// Responses by route template and platform (`metrics.routes`), as one event loop counts them: how the cache took
/// part, the body bytes sent, and the time from the request's head to the response's end in histogram buckets.
/// Like ``RequestTally``, written by its own loop only and read when the metrics are rendered.
public final class RouteTally: @unchecked Sendable {
    /// The counts of one route and platform: one per cache label, the bytes, one per duration bucket (each
    /// duration in the first bucket that holds it; rendering adds them up into Prometheus's cumulative buckets), the
    /// count of every duration (the `+Inf` bucket), and their sum in microseconds.
    static let cacheLabels = RequestTally.cacheLabels
    static let bucketBounds = ProxyMetrics.upstreamDurationBuckets
    /// The bounds in nanoseconds, as a response's duration is compared with them.
    static var bucketNanoseconds: [Int64] { ProxyMetrics.upstreamDurationBucketNanoseconds }
    static var bytesSlot: Int { cacheLabels.count }
    static var firstBucketSlot: Int { bytesSlot + 1 }
    static var countSlot: Int { firstBucketSlot + bucketBounds.count }
    static var sumSlot: Int { countSlot + 1 }
    static var slotsPerSeries: Int { sumSlot + 1 }

    let seriesCount: Int
    private let counts: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>
    private var slotCount: Int { seriesCount * Self.slotsPerSeries }

    /// A tally of `seriesCount` route and platform pairs.
    init(seriesCount: Int) {
        self.seriesCount = seriesCount
        let total = seriesCount * Self.slotsPerSeries
        counts = UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>.allocate(capacity: total)
        counts.initialize(repeating: UnsafeAtomic<Int>.Storage(0), count: total)
    }

    deinit {
        counts.deinitialize(count: slotCount)
        counts.deallocate()
    }

    /// Counts one response of the series `series`.
    func count(series: Int, cacheResult: CacheResult?, bytes: Int, duration: TimeAmount) {
        let base = counts + series * Self.slotsPerSeries
        UnsafeAtomic<Int>(at: base + RequestTally.cacheIndex(cacheResult)).wrappingIncrement(ordering: .relaxed)
        UnsafeAtomic<Int>(at: base + Self.bytesSlot).wrappingIncrement(by: bytes, ordering: .relaxed)
        let nanoseconds = duration.nanoseconds
        if let bucket = Self.bucketNanoseconds.firstIndex(where: { nanoseconds <= $0 }) {
            UnsafeAtomic<Int>(at: base + Self.firstBucketSlot + bucket).wrappingIncrement(ordering: .relaxed)
        }
        UnsafeAtomic<Int>(at: base + Self.countSlot).wrappingIncrement(ordering: .relaxed)
        UnsafeAtomic<Int>(at: base + Self.sumSlot).wrappingIncrement(
            by: Int(nanoseconds / 1000),
            ordering: .relaxed
        )
    }

    /// The count in `slot` of the series `series` so far.
    func count(series: Int, slot: Int) -> Int {
        UnsafeAtomic<Int>(at: counts + series * Self.slotsPerSeries + slot).load(ordering: .relaxed)
    }
}

extension Duration {
    /// The whole nanoseconds in this duration (saturating).
    var nanosecondsValue: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : whole + attoseconds / 1_000_000_000
    }
}
