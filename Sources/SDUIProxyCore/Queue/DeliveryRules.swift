/// The rules of delivery, without I/O: what becomes of a queued request after an attempt, or before one when it
/// is too old to be tried.
public struct DeliveryRules: Sendable {
    /// What one attempt produced.
    public enum AttemptResult: Sendable, Equatable {
        /// The backend answered with this status.
        case response(status: Int)
        /// No answer: the error from the ``NetworkClient``.
        case error(ProxyError)
    }

    /// What to do with the entry.
    public enum Decision: Sendable, Equatable {
        /// Final: the backend took it.
        case delivered(status: Int)
        /// Try again at the given time.
        case retry(at: QueueInstant, error: String, status: Int?)
        /// Final: given up.
        case failed(error: String, status: Int?)
    }

    public var retry: QueueConfiguration.RetryPolicy
    /// The backend statuses that are tried again; every other status that is not a success is final.
    public var retryableStatuses: Set<Int>

    public init(retry: QueueConfiguration.RetryPolicy, retryableStatuses: Set<Int>) {
        self.retry = retry
        self.retryableStatuses = retryableStatuses
    }

    /// The decision taken before attempting, at `now`, a request queued at `enqueuedAt` whose last attempt
    /// (if any) failed with `lastError` and `lastStatus`: failed when it is older than `maxAge` (after a long
    /// outage or a restart), nil when it may be tried. The last failure is kept in the final one, to say why the
    /// request never got through.
    public func beforeAttempt(
        enqueuedAt: QueueInstant,
        lastError: String?,
        lastStatus: Int?,
        now: QueueInstant
    ) -> Decision? {
        guard now >= enqueuedAt.advanced(by: retry.maxAge) else { return nil }
        return .failed(
            error: "gave up: older than maxAge (\(Self.describe(retry.maxAge)))"
                + (lastError.map { "; last error: \($0)" } ?? ""),
            status: lastStatus
        )
    }

    /// The decision after attempt number `attempts` of a request queued at `enqueuedAt` produced `result`.
    ///
    /// - Parameter unitRandom: a number in `0...1`, the jitter of the backoff.
    public func afterAttempt(
        _ result: AttemptResult,
        attempts: Int,
        enqueuedAt: QueueInstant,
        now: QueueInstant,
        unitRandom: Double
    ) -> Decision {
        let error: String
        let status: Int?
        switch result {
        case .response(let code) where (200..<400).contains(code):
            return .delivered(status: code)
        case .response(let code):
            status = code
            error = "the backend answered \(code)"
            guard retryableStatuses.contains(code) else { return .failed(error: error, status: code) }
        case .error(let proxyError):
            status = nil
            // What a webhook and GET /queue/ID show: the kind and message, never the detail meant for the log.
            error = "\(proxyError.kind): \(proxyError.message)"
            guard proxyError.kind == .network || proxyError.kind == .timeout else {
                return .failed(error: error, status: nil)
            }
        }
        guard attempts < retry.maxAttempts else {
            return .failed(error: "gave up after \(attempts) attempts; last error: \(error)", status: status)
        }
        let next = now.advanced(by: retry.delay(afterAttempts: attempts, unitRandom: unitRandom))
        guard next < enqueuedAt.advanced(by: retry.maxAge) else {
            return .failed(
                error: "gave up after \(attempts) attempts: older than maxAge (\(Self.describe(retry.maxAge))) "
                    + "before the next one; last error: \(error)",
                status: status
            )
        }
        return .retry(at: next, error: error, status: status)
    }

    private static func describe(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        if milliseconds % 1000 != 0 { return "\(milliseconds)ms" }
        return "\(milliseconds / 1000)s"
    }
}
