import Prometheus

/// The shared write queue's metrics: claims made by this replica, and the claims among them that took over a
/// request whose lease ran out (its replica died, or lost the database, mid-delivery).
public final class QueueClaimMetrics: Sendable {
    private let claims: Counter
    private let leaseExpiries: Counter

    public init(registry: PrometheusCollectorRegistry) {
        claims = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "sdui",
                metricName: "queue_claims",
                unitName: "total",
                helpText: "Queued requests this replica claimed for delivery from the shared store."
            )
        )
        leaseExpiries = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "sdui",
                metricName: "queue_lease_expiries",
                unitName: "total",
                helpText: "Claims that took over a request whose previous deliverer's lease had run out."
            )
        )
    }

    func claimed(count: Int = 1, takenOver: Int = 0) {
        if count > 0 { claims.increment(by: Int64(count)) }
        if takenOver > 0 { leaseExpiries.increment(by: Int64(takenOver)) }
    }
}
