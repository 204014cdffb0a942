import SDUIProxyCore
import Testing

@Suite("Warm-up readiness (prefetch.readyWhen)")
struct WarmUpReadinessTests {
    @Test("finished: ready once every pair was tried, failures counted; nothing is tried again")
    func finished() {
        var readiness = WarmUpReadiness(total: 3)
        var retries: Bool
        #expect(!readiness.isReady(.finished))
        retries = readiness.record("/a", succeeded: true, rule: .finished)
        #expect(!retries)
        retries = readiness.record("/b", succeeded: false, rule: .finished)
        #expect(!retries)
        #expect(!readiness.isReady(.finished))
        retries = readiness.record("/c", succeeded: false, rule: .finished)
        #expect(!retries)
        #expect(readiness.isReady(.finished))
        #expect(readiness.done == 3)
        #expect(readiness.failed == 2)
        #expect(!readiness.isReady(.succeeded))
    }

    @Test("succeeded: not ready while any pair has failed, failed ones are tried again, ready once all succeeded")
    func succeeded() {
        var readiness = WarmUpReadiness(total: 3)
        var retries: Bool
        retries = readiness.record("/a", succeeded: true, rule: .succeeded)
        #expect(!retries)
        retries = readiness.record("/b", succeeded: false, rule: .succeeded)
        #expect(retries)
        retries = readiness.record("/c", succeeded: false, rule: .succeeded)
        #expect(retries)
        #expect(readiness.done == 3)
        #expect(readiness.failed == 2)
        #expect(!readiness.isReady(.succeeded))
        // A retry that fails again keeps the pair failing, and counts it once.
        retries = readiness.record("/b", succeeded: false, rule: .succeeded)
        #expect(retries)
        #expect(readiness.failed == 2)
        #expect(readiness.done == 3)
        retries = readiness.record("/b", succeeded: true, rule: .succeeded)
        #expect(!retries)
        #expect(readiness.failed == 1)
        #expect(!readiness.isReady(.succeeded))
        retries = readiness.record("/c", succeeded: true, rule: .succeeded)
        #expect(!retries)
        #expect(readiness.failed == 0)
        #expect(readiness.succeeded == 3)
        #expect(readiness.isReady(.succeeded))
    }

    @Test("a pair that succeeded once stays counted: a later failed refresh neither unreadies nor is retried")
    func laterFailureKeepsReadiness() {
        var readiness = WarmUpReadiness(total: 1)
        var retries: Bool
        retries = readiness.record("/a", succeeded: true, rule: .succeeded)
        #expect(!retries)
        #expect(readiness.isReady(.succeeded))
        retries = readiness.record("/a", succeeded: false, rule: .succeeded)
        #expect(!retries)
        #expect(readiness.isReady(.succeeded))
        #expect(readiness.failed == 0)
        #expect(readiness.hasSucceeded("/a"))
    }

    @Test("no declared URLs: ready under both rules at once")
    func nothingDeclared() {
        let readiness = WarmUpReadiness(total: 0)
        #expect(readiness.isReady(.finished))
        #expect(readiness.isReady(.succeeded))
    }

    @Test("retries back off 1, 2, 4 ... seconds up to a minute, each between half and all of that")
    func retryDelays() {
        let ceilings = (1...9).map { WarmUpReadiness.retryDelay(afterFailures: $0, unitRandom: 1) }
        #expect(ceilings == [1, 2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
        #expect(WarmUpReadiness.retryDelay(afterFailures: 3, unitRandom: 0) == .seconds(2))
        #expect(WarmUpReadiness.retryDelay(afterFailures: 3, unitRandom: 0.5) == .seconds(3))
        #expect(WarmUpReadiness.retryDelay(afterFailures: 0, unitRandom: 1) == .seconds(1))
        #expect(WarmUpReadiness.retryDelay(afterFailures: 1_000, unitRandom: 2) == .seconds(60))
        for failures in 1...20 {
            for random in [0.0, 0.3, 0.999] {
                let delay = WarmUpReadiness.retryDelay(afterFailures: failures, unitRandom: random)
                #expect(delay >= .milliseconds(500) && delay <= .seconds(60))
            }
        }
    }
}
