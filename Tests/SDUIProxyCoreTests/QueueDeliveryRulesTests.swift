import SDUIProxyCore
import Testing

/// The pure rules: what an attempt's result turns into, and the backoff with jitter.
@Suite struct QueueDeliveryRulesTests {
    private let start = QueueInstant(millisecondsSinceEpoch: 1_000_000)
    private let rules = DeliveryRules(
        retry: .init(maxAttempts: 4, backoff: .milliseconds(100), maxBackoff: .seconds(1), maxAge: .seconds(10)),
        retryableStatuses: [502, 503, 504]
    )

    private func decide(
        _ result: DeliveryRules.AttemptResult,
        attempts: Int = 1,
        after elapsed: Duration = .zero
    )
        -> DeliveryRules.Decision
    {
        rules.afterAttempt(
            result,
            attempts: attempts,
            enqueuedAt: start,
            now: start.advanced(by: elapsed),
            unitRandom: 1
        )
    }

    @Test(arguments: [200, 201, 204, 301, 304, 399])
    func successAndRedirectStatusesDeliver(status: Int) {
        #expect(decide(.response(status: status)) == .delivered(status: status))
    }

    @Test(arguments: [400, 401, 404, 409, 422, 429, 500, 501])
    func otherStatusesFailAtOnce(status: Int) {
        guard case .failed(let error, let code) = decide(.response(status: status)) else {
            Issue.record("status \(status) was not a final failure")
            return
        }
        #expect(code == status)
        #expect(error.contains("\(status)"))
    }

    @Test func retryableStatusesAndNetworkErrorsAreRetriedWithBackoff() {
        #expect(
            decide(.response(status: 503))
                == .retry(at: start.advanced(by: .milliseconds(100)), error: "the backend answered 503", status: 503)
        )
        let network = ProxyError(.network, "connection refused")
        #expect(
            decide(.error(network), attempts: 2)
                == .retry(at: start.advanced(by: .milliseconds(200)), error: "network: connection refused", status: nil)
        )
        let timeout = ProxyError(.timeout, "slow")
        #expect(
            decide(.error(timeout), attempts: 3)
                == .retry(at: start.advanced(by: .milliseconds(400)), error: "timeout: slow", status: nil)
        )
        // What a webhook and GET /queue/ID show never carries the detail meant for the log.
        let detailed = ProxyError(.url, "bad", detail: "NIOConnectionError(host: 10.0.0.7)")
        guard case .failed(let shown, _) = decide(.error(detailed)), !shown.contains("10.0.0.7") else {
            Issue.record("a detail reached the recorded error")
            return
        }
        guard case .failed = decide(.error(ProxyError(.url, "bad"))) else {
            Issue.record("a URL error was retried")
            return
        }
    }

    @Test func attemptsAndAgeRunOut() {
        guard case .failed(let error, let status) = decide(.response(status: 502), attempts: 4) else {
            Issue.record("the fourth of four attempts was retried")
            return
        }
        #expect(error == "gave up after 4 attempts; last error: the backend answered 502")
        #expect(status == 502)

        guard case .failed(let aged, _) = decide(.response(status: 502), after: .milliseconds(9950)) else {
            Issue.record("a retry past maxAge was scheduled")
            return
        }
        #expect(aged.contains("maxAge (10s)"))

        func before(after elapsed: Duration, lastError: String?, lastStatus: Int?) -> DeliveryRules.Decision? {
            rules.beforeAttempt(
                enqueuedAt: start,
                lastError: lastError,
                lastStatus: lastStatus,
                now: start.advanced(by: elapsed)
            )
        }
        #expect(before(after: .seconds(9), lastError: "the backend answered 503", lastStatus: 503) == nil)
        #expect(
            before(after: .seconds(10), lastError: "the backend answered 503", lastStatus: 503)
                == .failed(error: "gave up: older than maxAge (10s); last error: the backend answered 503", status: 503)
        )
        // Never tried (a restart after a long outage): only the age is given as the reason.
        #expect(
            before(after: .seconds(11), lastError: nil, lastStatus: nil)
                == .failed(error: "gave up: older than maxAge (10s)", status: nil)
        )
    }

    @Test func backoffDoublesIsCappedAndJittersInItsUpperHalf() {
        let policy = QueueConfiguration.RetryPolicy(
            maxAttempts: 10,
            backoff: .milliseconds(500),
            maxBackoff: .seconds(30),
            maxAge: .seconds(3600)
        )
        #expect(policy.delay(afterAttempts: 1, unitRandom: 1) == .milliseconds(500))
        #expect(policy.delay(afterAttempts: 1, unitRandom: 0) == .milliseconds(250))
        #expect(policy.delay(afterAttempts: 4, unitRandom: 1) == .seconds(4))
        #expect(policy.delay(afterAttempts: 20, unitRandom: 1) == .seconds(30))
        #expect(policy.delay(afterAttempts: 1000, unitRandom: 0) == .seconds(15))
        for _ in 0..<100 {
            let delay = policy.delay(afterAttempts: 3, unitRandom: .random(in: 0...1))
            #expect(delay >= .seconds(1) && delay <= .seconds(2))
        }
    }

    @Test func instantsPrintAsRFC3339() {
        #expect(QueueInstant(millisecondsSinceEpoch: 0).description == "1970-01-01T00:00:00.000Z")
        #expect(QueueInstant(millisecondsSinceEpoch: 1_738_325_045_250).description == "2025-01-31T12:04:05.250Z")
        #expect(
            QueueInstant(millisecondsSinceEpoch: 1000).advanced(by: .milliseconds(1500)).millisecondsSinceEpoch == 2500
        )
    }
}
