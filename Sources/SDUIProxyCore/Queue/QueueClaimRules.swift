/// Who may deliver a queued request from a store that several replicas share, without I/O.
///
/// A replica delivers a request only while it holds the request's lease: an owner (one per process, so two
/// replicas given the same name still differ) and an expiry on the database's clock. It renews the lease while the
/// delivery lasts and clears it when it records the outcome. A lease that ran out belongs to a replica that died or
/// lost the database: another replica may take the request over, and delivers it with the same `Idempotency-Key`.
///
/// A sequential route is delivered strictly in order: only its head (its oldest pending request) is ever leased,
/// so at most one of its requests is in flight in the whole fleet.
public enum QueueClaimRules {
    /// What the deliverer of a sequential route does with the route's head.
    public enum HeadDecision: Sendable, Equatable {
        /// Lease it and deliver it. `takenOver` names the replica whose lease ran out, if one had it.
        case claim(takenOver: String?)
        /// Look again at this time (milliseconds on the database's clock): the head backs off, or another replica
        /// holds it until then.
        case wait(untilMilliseconds: Int64)
    }

    /// The lease a request has now, as the store holds it.
    public struct Lease: Sendable, Equatable {
        public var owner: String
        /// When it runs out, in milliseconds on the database's clock.
        public var untilMilliseconds: Int64

        public init(owner: String, untilMilliseconds: Int64) {
            self.owner = owner
            self.untilMilliseconds = untilMilliseconds
        }
    }

    /// The decision about a head due at `nextAttemptAt` with `lease`, taken by `owner` at `now` (all on the
    /// database's clock).
    ///
    /// A lease of `owner`'s own is one it left behind (a recording that failed before a stop): it is taken again.
    public static func head(
        nextAttemptAt: Int64,
        lease: Lease?,
        owner: String,
        now: Int64
    ) -> HeadDecision {
        if let lease, lease.owner != owner, lease.untilMilliseconds > now {
            return .wait(untilMilliseconds: lease.untilMilliseconds)
        }
        guard nextAttemptAt <= now else { return .wait(untilMilliseconds: nextAttemptAt) }
        return .claim(takenOver: lease.flatMap { $0.owner == owner ? nil : $0.owner })
    }

    /// How often a delivery in flight renews its lease: three times per `leaseTimeout`, so that one late renewal
    /// (a slow database) does not lose it.
    public static func renewalInterval(leaseTimeout: Duration) -> Duration {
        max(leaseTimeout / 3, .milliseconds(10))
    }

    /// A lease owner for one process: `replicaName` and 32 random bits.
    public static func owner(replicaName: String) -> String {
        let suffix = String(UInt32.random(in: .min ... .max), radix: 16)
        return replicaName + "/" + String(repeating: "0", count: 8 - suffix.count) + suffix
    }
}
