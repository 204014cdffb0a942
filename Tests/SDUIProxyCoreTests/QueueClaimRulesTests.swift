import SDUIProxyCore
import Testing

/// Who may deliver the head of a sequential route from a shared store.
@Suite struct QueueClaimRulesTests {
    private let now: Int64 = 1_000_000

    @Test("a free head that is due is claimed; one backing off is waited for until its next attempt")
    func freeHead() {
        #expect(QueueClaimRules.head(nextAttemptAt: now, lease: nil, owner: "a/1", now: now) == .claim(takenOver: nil))
        #expect(
            QueueClaimRules.head(nextAttemptAt: now - 5, lease: nil, owner: "a/1", now: now) == .claim(takenOver: nil)
        )
        #expect(
            QueueClaimRules.head(nextAttemptAt: now + 250, lease: nil, owner: "a/1", now: now)
                == .wait(untilMilliseconds: now + 250)
        )
    }

    @Test("another replica's live lease is waited out, even when the head is due")
    func liveLeaseOfAnother() {
        let lease = QueueClaimRules.Lease(owner: "b/2", untilMilliseconds: now + 1)
        #expect(
            QueueClaimRules.head(nextAttemptAt: now - 100, lease: lease, owner: "a/1", now: now)
                == .wait(untilMilliseconds: now + 1)
        )
    }

    @Test("a lease that ran out is taken over, naming its holder, once the head is due")
    func expiredLease() {
        for until in [now, now - 1, now - 60_000] {
            let lease = QueueClaimRules.Lease(owner: "b/2", untilMilliseconds: until)
            #expect(
                QueueClaimRules.head(nextAttemptAt: now, lease: lease, owner: "a/1", now: now)
                    == .claim(takenOver: "b/2")
            )
        }
        let lease = QueueClaimRules.Lease(owner: "b/2", untilMilliseconds: now - 1)
        #expect(
            QueueClaimRules.head(nextAttemptAt: now + 10, lease: lease, owner: "a/1", now: now)
                == .wait(untilMilliseconds: now + 10)
        )
    }

    @Test("a lease of the deciding process's own, left behind, is claimed again without a take-over")
    func ownLease() {
        let lease = QueueClaimRules.Lease(owner: "a/1", untilMilliseconds: now + 30_000)
        #expect(
            QueueClaimRules.head(nextAttemptAt: now, lease: lease, owner: "a/1", now: now) == .claim(takenOver: nil)
        )
    }

    @Test("two processes given one replica name still hold leases of their own")
    func ownersDiffer() {
        let owners = Set((0..<50).map { _ in QueueClaimRules.owner(replicaName: "web-1") })
        #expect(owners.count == 50)
        #expect(owners.allSatisfy { $0.hasPrefix("web-1/") && $0.count == "web-1/".count + 8 })
    }

    @Test("a lease is renewed three times per timeout")
    func renewal() {
        #expect(QueueClaimRules.renewalInterval(leaseTimeout: .seconds(30)) == .seconds(10))
        #expect(QueueClaimRules.renewalInterval(leaseTimeout: .milliseconds(3)) == .milliseconds(10))
    }
}
