import Logging
import NIOCore
import SDUIProxyCore
import Synchronization

/// The start-up warm-up of declared URLs (`prefetch.urls` × `prefetch.platforms`), the readiness it gates,
/// and, with `prefetch.refresh`, the re-fetching of those URLs shortly before they expire.
public final class WarmUp: Sendable {
    /// Progress of the first warm-up.
    public struct Progress: Sendable, Equatable {
        public var total = 0
        public var done = 0
        public var failed = 0
        public var isFinished: Bool { done == total }
    }

    private struct State {
        var progress = Progress()
        var stopped = false
        /// The next refresh of each declared URL and platform.
        var refreshes: [String: Scheduled<Void>] = [:]
    }

    private let prefetcher: Prefetcher
    private let configuration: ProxyConfiguration.Prefetch
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State())

    public init(
        prefetcher: Prefetcher,
        configuration: ProxyConfiguration.Prefetch,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) {
        self.prefetcher = prefetcher
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        // Known before the start, so that a warm-up not started yet does not read as finished (0 of 0).
        state.withLock { $0.progress.total = configuration.urls.count * configuration.platforms.count }
    }

    public var progress: Progress { state.withLock { $0.progress } }

    /// Fetches every declared URL for every declared platform; one failure does not stop the others.
    /// - Returns: a future that completes when all have finished.
    @discardableResult
    public func start() -> EventLoopFuture<Progress> {
        let jobs = configuration.urls.flatMap { url in configuration.platforms.map { (url, $0) } }
        let eventLoop = eventLoopGroup.any()
        guard !jobs.isEmpty else { return eventLoop.makeSucceededFuture(progress) }
        logger.info("warm-up started", metadata: ["urls": "\(configuration.urls.count)", "total": "\(jobs.count)"])
        let finished = jobs.map { url, platform in
            run(url: url, platform: platform).map { outcome in self.record(outcome, url: url, platform: platform) }
        }
        return EventLoopFuture.andAllComplete(finished, on: eventLoop).map {
            let progress = self.progress
            self.logger.info(
                "warm-up finished",
                metadata: ["done": "\(progress.done)", "total": "\(progress.total)", "failed": "\(progress.failed)"]
            )
            return progress
        }
    }

    /// Stops scheduling refreshes.
    public func stop() {
        let pending = state.withLock { state -> [Scheduled<Void>] in
            state.stopped = true
            defer { state.refreshes.removeAll() }
            return Array(state.refreshes.values)
        }
        for scheduled in pending { scheduled.cancel() }
    }

    /// Prefetches `url` for `platform`; with `prefetch.refresh`, schedules the next fetch from what came of it.
    private func run(
        url: String,
        platform: String,
        schedule: RefreshSchedule = RefreshSchedule()
    ) -> EventLoopFuture<Prefetcher.Outcome> {
        switch prefetcher.resolve(url) {
        case .failure(let reason):
            return eventLoopGroup.any().makeSucceededFuture(.failed(ProxyError(.url, "\(url): \(reason)")))
        case .success(let target):
            let outcome = prefetcher.prefetch(
                target: target,
                platform: platform,
                followActions: configuration.followActions,
                forceRefresh: schedule.refreshesStoredAnswer
            )
            outcome.whenSuccess { self.scheduleRefresh(after: $0, url: url, platform: platform, schedule: schedule) }
            return outcome
        }
    }

    private func record(_ outcome: Prefetcher.Outcome, url: String, platform: String) {
        let progress = state.withLock { state -> Progress in
            state.progress.done += 1
            if outcome.isFailure { state.progress.failed += 1 }
            return state.progress
        }
        switch outcome {
        case .failed(let error):
            logger.warning(
                "warm-up of a declared URL failed",
                metadata: ["url": "\(url)", "platform": "\(platform)", "kind": "\(error.kind)", "error": "\(error)"]
            )
        case .backendError(let status):
            logger.warning(
                "warm-up of a declared URL failed: the backend answered an error",
                metadata: ["url": "\(url)", "platform": "\(platform)", "status": "\(status.code)"]
            )
        case .cached, .uncacheable:
            break
        }
        logger.info(
            "warm-up progress",
            metadata: ["done": "\(progress.done)", "total": "\(progress.total)", "failed": "\(progress.failed)"]
        )
    }

    /// With `prefetch.refresh`, schedules the URL's next fetch (``RefreshSchedule``).
    private func scheduleRefresh(
        after outcome: Prefetcher.Outcome,
        url: String,
        platform: String,
        schedule: RefreshSchedule
    ) {
        guard configuration.refresh else { return }
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
        state.withLock { state in
            guard !state.stopped else { return }
            let scheduled = eventLoopGroup.any().scheduleTask(in: delay) {
                guard !self.state.withLock({ $0.stopped }) else { return }
                self.logger.debug("refreshing declared URL", metadata: ["url": "\(url)", "platform": "\(platform)"])
                _ = self.run(url: url, platform: platform, schedule: nextSchedule)
            }
            state.refreshes[url + "\u{0}" + platform] = scheduled
        }
    }

    private static func reason(_ outcome: Prefetcher.Outcome) -> String {
        outcome.failureReason ?? "the answer has no lifetime left"
    }
}
