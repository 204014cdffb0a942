import Logging
import NIOCore
import SDUIProxyCore
import Synchronization

/// The start-up warm-up of declared URLs (`prefetch.urls` × `prefetch.platforms`), the readiness it gates
/// (`prefetch.readyWhen`, decided by ``WarmUpReadiness``), the retries of failed URLs that `readyWhen: succeeded`
/// waits for, and, with `prefetch.refresh`, the re-fetching of those URLs shortly before they expire.
public final class WarmUp: Sendable {
    /// Progress of the warm-up, as `/ready` reports it.
    public struct Progress: Sendable, Equatable {
        public var total = 0
        /// Declared URL and platform pairs whose first fetch has ended.
        public var done = 0
        /// Pairs whose last fetch failed and that have not been fetched successfully since.
        public var failed = 0
        /// Whether the warm-up has done what `prefetch.readyWhen` asks.
        public var isReady = false
        public var isFinished: Bool { done == total }
    }

    /// Runs a task after a delay and returns what cancels it: the event loop's timer in the proxy; tests pass
    /// their own, to fire retries when they choose instead of after a wait on the wall clock. It must not run the
    /// task before it returns (the warm-up calls it while it holds its state).
    public typealias Scheduler = @Sendable (TimeAmount, @escaping @Sendable () -> Void) -> @Sendable () -> Void

    private struct State {
        var readiness: WarmUpReadiness
        var stopped = false
        /// What cancels the next fetch (a refresh or a retry) of each declared URL and platform.
        var nextFetches: [String: @Sendable () -> Void] = [:]
    }

    private let prefetcher: Prefetcher
    private let configuration: ProxyConfiguration.Prefetch
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let scheduler: Scheduler
    private let state: Mutex<State>

    /// - Parameter scheduler: runs the refreshes and retries; by default on one of `eventLoopGroup`'s loops.
    public init(
        prefetcher: Prefetcher,
        configuration: ProxyConfiguration.Prefetch,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger,
        scheduler: Scheduler? = nil
    ) {
        self.prefetcher = prefetcher
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.scheduler =
            scheduler ?? { delay, task in
                let scheduled = eventLoopGroup.any().scheduleTask(in: delay, task)
                return { scheduled.cancel() }
            }
        // Known before the start, so that a warm-up not started yet does not read as finished (0 of 0).
        state = Mutex(
            State(readiness: WarmUpReadiness(total: configuration.urls.count * configuration.platforms.count))
        )
    }

    public var progress: Progress {
        let rule = configuration.readyWhen
        return state.withLock { state in
            let readiness = state.readiness
            return Progress(
                total: readiness.total,
                done: readiness.done,
                failed: readiness.failed,
                isReady: readiness.isReady(rule)
            )
        }
    }

    /// Fetches every declared URL for every declared platform; one failure does not stop the others.
    /// - Returns: a future that completes when all have been tried once.
    @discardableResult
    public func start() -> EventLoopFuture<Progress> {
        let jobs = configuration.urls.flatMap { url in configuration.platforms.map { (url, $0) } }
        let eventLoop = eventLoopGroup.any()
        guard !jobs.isEmpty else { return eventLoop.makeSucceededFuture(progress) }
        logger.info("warm-up started", metadata: ["urls": "\(configuration.urls.count)", "total": "\(jobs.count)"])
        let finished = jobs.map { url, platform in run(url: url, platform: platform) }
        return EventLoopFuture.andAllComplete(finished, on: eventLoop).map {
            let progress = self.progress
            self.logger.info(
                "warm-up finished",
                metadata: ["done": "\(progress.done)", "total": "\(progress.total)", "failed": "\(progress.failed)"]
            )
            return progress
        }
    }

    /// Stops scheduling refreshes and retries.
    public func stop() {
        let pending = state.withLock { state -> [@Sendable () -> Void] in
            state.stopped = true
            defer { state.nextFetches.removeAll() }
            return Array(state.nextFetches.values)
        }
        for cancel in pending { cancel() }
    }

    /// Prefetches `url` for `platform`, records what came of it, and schedules the next fetch: a refresh with
    /// `prefetch.refresh`, a retry of a failure that `prefetch.readyWhen: succeeded` waits for.
    ///
    /// - Parameter failures: the failed tries in a row before this one.
    private func run(
        url: String,
        platform: String,
        schedule: RefreshSchedule = RefreshSchedule(),
        failures: Int = 0
    ) -> EventLoopFuture<Prefetcher.Outcome> {
        let outcome: EventLoopFuture<Prefetcher.Outcome>
        switch prefetcher.resolve(url) {
        case .failure(let reason):
            outcome = eventLoopGroup.any().makeSucceededFuture(.failed(ProxyError(.url, "\(url): \(reason)")))
        case .success(let target):
            outcome = prefetcher.prefetch(
                target: target,
                platform: platform,
                followActions: configuration.followActions,
                forceRefresh: schedule.refreshesStoredAnswer
            )
        }
        outcome.whenSuccess { outcome in
            let retries = self.record(outcome, url: url, platform: platform, failures: failures)
            if self.configuration.refresh {
                self.scheduleRefresh(after: outcome, url: url, platform: platform, schedule: schedule)
            } else if retries {
                self.scheduleRetry(url: url, platform: platform, failures: failures + 1, after: outcome)
            }
        }
        return outcome
    }

    /// Records a fetch's outcome; returns whether `prefetch.readyWhen` needs the pair tried again.
    private func record(_ outcome: Prefetcher.Outcome, url: String, platform: String, failures: Int) -> Bool {
        let job = Self.job(url: url, platform: platform)
        let rule = configuration.readyWhen
        let (firstTry, retries, progress) = state.withLock { state -> (Bool, Bool, Progress) in
            let doneBefore = state.readiness.done
            let retries = state.readiness.record(job, succeeded: !outcome.isFailure, rule: rule)
            let readiness = state.readiness
            let progress = Progress(
                total: readiness.total,
                done: readiness.done,
                failed: readiness.failed,
                isReady: readiness.isReady(rule)
            )
            // The pair's first try ended now: it counts in the progress of the start-up warm-up.
            return (readiness.done > doneBefore, retries, progress)
        }
        let metadata: Logger.Metadata = ["url": "\(url)", "platform": "\(platform)"]
        switch outcome {
        case .failed(let error) where firstTry:
            logger.warning(
                "warm-up of a declared URL failed",
                metadata: metadata.merging(["kind": "\(error.kind)", "error": "\(error)"]) { $1 }
            )
        case .backendError(let status) where firstTry:
            logger.warning(
                "warm-up of a declared URL failed: the backend answered an error",
                metadata: metadata.merging(["status": "\(status.code)"]) { $1 }
            )
        case .cached, .uncacheable:
            if failures > 0 {
                logger.info(
                    "declared URL fetched after failing",
                    metadata: metadata.merging(["failures": "\(failures)", "failed": "\(progress.failed)"]) { $1 }
                )
            }
        default:
            break
        }
        if firstTry {
            logger.info(
                "warm-up progress",
                metadata: ["done": "\(progress.done)", "total": "\(progress.total)", "failed": "\(progress.failed)"]
            )
        }
        return retries
    }

    /// Tries a failed pair again after ``WarmUpReadiness/retryDelay(afterFailures:unitRandom:)``.
    private func scheduleRetry(url: String, platform: String, failures: Int, after outcome: Prefetcher.Outcome) {
        let delay = WarmUpReadiness.retryDelay(afterFailures: failures, unitRandom: .random(in: 0...1))
        let timeAmount = TimeAmount.nanoseconds(Int64(delay / .nanoseconds(1)))
        logger.warning(
            "declared URL not fetched yet; not ready until it is; trying again",
            metadata: [
                "url": "\(url)", "platform": "\(platform)", "reason": "\(Self.reason(outcome))",
                "failures": "\(failures)", "retryInMilliseconds": "\(timeAmount.nanoseconds / 1_000_000)",
            ]
        )
        scheduleFetch(url: url, platform: platform, in: timeAmount) {
            _ = self.run(url: url, platform: platform, failures: failures)
        }
    }

    /// Runs `fetch` after `delay`, unless the warm-up has stopped; it replaces the pair's next fetch.
    private func scheduleFetch(
        url: String,
        platform: String,
        in delay: TimeAmount,
        _ fetch: @escaping @Sendable () -> Void
    ) {
        let job = Self.job(url: url, platform: platform)
        state.withLock { state in
            guard !state.stopped else { return }
            state.nextFetches[job] = scheduler(delay) {
                guard !self.state.withLock({ $0.stopped }) else { return }
                fetch()
            }
        }
    }

    private static func job(url: String, platform: String) -> String { url + "\u{0}" + platform }

    /// With `prefetch.refresh`, schedules the URL's next fetch (``RefreshSchedule``).
    private func scheduleRefresh(
        after outcome: Prefetcher.Outcome,
        url: String,
        platform: String,
        schedule: RefreshSchedule
    ) {
        let metadata: Logger.Metadata = [
            "url": "\(url)", "platform": "\(platform)", "outcome": "\(outcome.name)",
            "reason": "\(Self.reason(outcome))",
        ]
        guard case .fetch(let delay, let nextSchedule) = schedule.next(after: outcome) else {
            logger.warning("declared URL not refreshed", metadata: metadata)
            return
        }
        let stored = if case .cached(_, _, let lifetime) = outcome { lifetime > 0 } else { false }
        if !stored {
            logger.warning(
                nextSchedule.refreshesStoredAnswer
                    ? "refresh of a declared URL stored nothing; trying again at its interval"
                    : "declared URL not stored yet; trying again",
                metadata: metadata.merging(["retryInSeconds": "\(delay.nanoseconds / 1_000_000_000)"]) { $1 }
            )
        }
        scheduleFetch(url: url, platform: platform, in: delay) {
            self.logger.debug("refreshing declared URL", metadata: ["url": "\(url)", "platform": "\(platform)"])
            _ = self.run(url: url, platform: platform, schedule: nextSchedule)
        }
    }

    private static func reason(_ outcome: Prefetcher.Outcome) -> String {
        outcome.failureReason ?? "the answer has no lifetime left"
    }
}
