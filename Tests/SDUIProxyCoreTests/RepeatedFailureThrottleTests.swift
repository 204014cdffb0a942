import SDUIProxyCore
import Testing

@Suite("Repeated failures: one log line per key and kind an interval")
struct RepeatedFailureThrottleTests {
    private let second: Int64 = 1_000_000_000

    @Test("the first failure is logged, repeats within the interval are counted, the next line says how many")
    func countsWhatItLeavesOut() {
        var throttle = RepeatedFailureThrottle(intervalNanoseconds: 10 * second)
        #expect(throttle.record(key: "/a", kind: "network", now: 0) == .log(suppressed: 0))
        for step in 1...5 {
            #expect(throttle.record(key: "/a", kind: "network", now: Int64(step) * second) == .suppress)
        }
        #expect(throttle.record(key: "/a", kind: "network", now: 10 * second) == .log(suppressed: 5))
        #expect(throttle.record(key: "/a", kind: "network", now: 11 * second) == .suppress)
        #expect(throttle.record(key: "/a", kind: "network", now: 20 * second) == .log(suppressed: 1))
        #expect(throttle.record(key: "/a", kind: "network", now: 40 * second) == .log(suppressed: 0))
    }

    @Test("keys are remembered by their first 256 bytes: a flood of long targets costs bounded memory")
    func longKeysTruncated() {
        var throttle = RepeatedFailureThrottle(intervalNanoseconds: 10 * second)
        let long = "/" + String(repeating: "a", count: 8000)
        #expect(throttle.record(key: long + "1", kind: "network", now: 0) == .log(suppressed: 0))
        // The same first 256 bytes: the same key.
        #expect(throttle.record(key: long + "2", kind: "network", now: 1) == .suppress)
        #expect(throttle.count == 1)
    }

    @Test("another key or another kind has a line of its own")
    func keysAndKindsApart() {
        var throttle = RepeatedFailureThrottle(intervalNanoseconds: 10 * second)
        #expect(throttle.record(key: "/a", kind: "network", now: 0) == .log(suppressed: 0))
        #expect(throttle.record(key: "/b", kind: "network", now: 0) == .log(suppressed: 0))
        #expect(throttle.record(key: "/a", kind: "timeout", now: 0) == .log(suppressed: 0))
        #expect(throttle.record(key: "/a", kind: "network", now: 1) == .suppress)
        #expect(throttle.count == 3)
    }

    @Test("a flood of distinct keys stays within the capacity and shares one overflow line")
    func boundedByCapacity() {
        var throttle = RepeatedFailureThrottle(intervalNanoseconds: 10 * second, capacity: 4)
        for index in 0..<4 {
            #expect(throttle.record(key: "/k\(index)", kind: "network", now: 0) == .log(suppressed: 0))
        }
        // Full, nothing expired: new keys go to the one overflow slot, logged once.
        #expect(throttle.record(key: "/k4", kind: "network", now: second) == .log(suppressed: 0))
        for index in 5..<1000 {
            #expect(throttle.record(key: "/k\(index)", kind: "network", now: second) == .suppress)
        }
        #expect(throttle.count == 5)
        // Once the remembered keys' interval has passed they are forgotten and new keys are remembered again.
        #expect(throttle.record(key: "/new", kind: "network", now: 10 * second) == .log(suppressed: 0))
        #expect(throttle.count <= 5)
        #expect(throttle.record(key: "/new", kind: "network", now: 10 * second + 1) == .suppress)
    }
}
