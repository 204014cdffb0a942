import Prometheus
import SDUIProxyCore

/// The fleet's metrics, made on the proxy's registry: invalidations sent and applied by kind, the fan-out lag, this
/// replica's cursor, reconnections, and caches emptied to stay in step.
public final class ClusterMetrics: Sendable {
    /// The upper bounds of the fan-out lag histogram's buckets: the target is well under 100 ms.
    public static let lagBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private let sentByKind: [String: Counter]
    private let appliedByKind: [String: Counter]
    private let lag: ValueHistogram
    private let cursorGauge: Gauge
    private let reconnects: Counter
    private let flushes: Counter

    static let kinds = ["targets", "prefix", "tag", "all"]

    public init(registry: PrometheusCollectorRegistry) {
        func counters(_ name: String, _ help: String) -> [String: Counter] {
            Dictionary(
                uniqueKeysWithValues: Self.kinds.map { kind in
                    (
                        kind,
                        registry.makeCounter(
                            descriptor: Self.descriptor(name, unit: "total", help: help),
                            labels: [("kind", kind)]
                        )
                    )
                }
            )
        }
        sentByKind = counters("fleet_invalidations_sent", "Invalidations made here and written to the fleet's log.")
        appliedByKind = counters("fleet_invalidations_applied", "Invalidations of other replicas applied here.")
        lag = registry.makeValueHistogram(
            descriptor: Self.descriptor(
                "fleet_fanout_lag",
                unit: "seconds",
                help: "Time from a row's write by one replica to its reading by this one."
            ),
            buckets: Self.lagBuckets
        )
        cursorGauge = registry.makeGauge(
            descriptor: Self.descriptor("fleet_cursor", help: "The id of the last row of the fleet's log applied here.")
        )
        reconnects = registry.makeCounter(
            descriptor: Self.descriptor(
                "fleet_reconnects",
                unit: "total",
                help: "Times the connection to the fleet's log was lost."
            )
        )
        flushes = registry.makeCounter(
            descriptor: Self.descriptor(
                "fleet_cache_flushes",
                unit: "total",
                help: "Times the cache was emptied to stay in step with the fleet (see the log for why)."
            )
        )
    }

    func sent(_ invalidation: CacheInvalidation) { sentByKind[Self.kind(of: invalidation)]?.increment() }
    func applied(_ invalidation: CacheInvalidation) { appliedByKind[Self.kind(of: invalidation)]?.increment() }
    func fanOutLag(seconds: Double) { lag.record(max(0, seconds)) }
    func cursor(_ id: Int64) { cursorGauge.set(Double(id)) }
    func reconnecting() { reconnects.increment() }
    func flushed() { flushes.increment() }

    private static func kind(of invalidation: CacheInvalidation) -> String {
        switch invalidation.scope {
        case .targets: "targets"
        case .prefix: "prefix"
        case .tag: "tag"
        case .all: "all"
        }
    }

    private static func descriptor(_ name: String, unit: String = "", help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "sdui", metricName: name, unitName: unit, helpText: help)
    }
}
