/// What the start-up warm-up of declared URLs has done, and whether that makes the proxy ready
/// (`prefetch.readyWhen`).
///
/// A job is one declared URL for one platform. Each is tried once at start-up; with
/// ``ProxyConfiguration/ReadyWhen/succeeded`` a failed one is tried again (``retryDelay(afterFailures:unitRandom:)``)
/// until it succeeds, and the proxy is not ready before every job has succeeded once. With
/// ``ProxyConfiguration/ReadyWhen/finished`` it is ready once every job has been tried, whatever came of it.
public struct WarmUpReadiness: Sendable, Equatable {
    /// The jobs: declared URLs times platforms.
    public let total: Int
    /// Jobs whose first try has ended.
    public private(set) var done = 0
    /// Jobs that have succeeded at least once.
    public private(set) var succeeded = 0
    /// Jobs whose last try failed and that have not succeeded since.
    public var failed: Int { failing.count }

    private var failing: Set<String> = []
    private var succeededJobs: Set<String> = []
    private var tried: Set<String> = []

    public init(total: Int) {
        self.total = total
    }

    /// Whether `job`'s answer ended its warm-up: it succeeded once already.
    public func hasSucceeded(_ job: String) -> Bool { succeededJobs.contains(job) }

    /// Records a try of `job` that `succeeded` or not; returns whether a failed job is to be tried again under
    /// `rule`.
    public mutating func record(_ job: String, succeeded didSucceed: Bool, rule: ProxyConfiguration.ReadyWhen) -> Bool {
        if tried.insert(job).inserted { done += 1 }
        if didSucceed {
            failing.remove(job)
            if succeededJobs.insert(job).inserted { succeeded += 1 }
            return false
        }
        // A job that succeeded once keeps its place: a later refresh that fails does not unready the proxy.
        guard !succeededJobs.contains(job) else { return false }
        failing.insert(job)
        return rule == .succeeded
    }

    /// Whether `/ready` says ready under `rule`.
    public func isReady(_ rule: ProxyConfiguration.ReadyWhen) -> Bool {
        switch rule {
        case .finished: done == total
        case .succeeded: succeeded == total
        }
    }

    /// The first retry's delay; each failure after it doubles the delay, up to ``longestRetryDelay``.
    public static let firstRetryDelay: Duration = .seconds(1)
    /// The longest wait between two tries of a failing job.
    public static let longestRetryDelay: Duration = .seconds(60)

    /// How long to wait before trying a job again after `failures` failed tries in a row (at least 1): 1, 2, 4 ...
    /// seconds up to a minute, each between half and all of that (`unitRandom`, from 0 to 1, picks where), so that
    /// the replicas of a fleet that started together against a backend that was down do not come back in step.
    public static func retryDelay(afterFailures failures: Int, unitRandom: Double) -> Duration {
        let doublings = min(max(failures, 1) - 1, 6)
        let ceiling = min(longestRetryDelay, firstRetryDelay * (1 << doublings))
        let share = 0.5 + 0.5 * min(max(unitRandom, 0), 1)
        return ceiling * share
    }
}
