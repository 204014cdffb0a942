import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization

/// Fetches screens before anyone asks for them (the seed's ViewClient `prefetch`): declared URLs, URLs sent to
/// the prefetch endpoint, and the targets of `shouldPrefetch` navigation actions in stored components.
///
/// Prefetches share the cache path's fetcher, so one for a key a client is already fetching joins that
/// exchange (and a client joins a prefetch in flight). They run at most ``ProxyConfiguration/Prefetch/concurrency``
/// at a time and queue behind each other, so a prefetch storm never takes more than that share of upstream
/// connections away from clients.
public final class Prefetcher: StoredComponentObserver {
    /// How one prefetch ended.
    public enum Outcome: Sendable, Equatable {
        /// The response is in the cache (fetched now, or already fresh) and stays fresh for `freshFor` of the
        /// `lifetime` seconds it is fresh for in all.
        case cached(bytes: Int, freshFor: Int64, lifetime: Int64)
        /// The backend answered with something that may not be stored.
        case uncacheable(reason: String)
        /// The backend answered with an error status (4xx or 5xx), so nothing was stored.
        case backendError(status: HTTPResponseStatus)
        /// No answer could be had.
        case failed(ProxyError)

        static func cached(_ entry: CachedResponse, at now: NIODeadline) -> Outcome {
            .cached(
                bytes: entry.bodyLength,
                freshFor: entry.remainingLifetime(at: now),
                lifetime: entry.freshnessLifetime
            )
        }

        public var name: String {
            switch self {
            case .cached: "cached"
            case .uncacheable: "uncacheable"
            case .backendError, .failed: "failed"
            }
        }

        /// Whether no usable answer came: the prefetch counts as failed and a declared URL is tried again.
        public var isFailure: Bool {
            switch self {
            case .backendError, .failed: true
            case .cached, .uncacheable: false
            }
        }

        /// What went wrong, for the log and the prefetch endpoint's `error`; nil for a stored answer.
        public var failureReason: String? {
            switch self {
            case .cached: nil
            case .uncacheable(let reason): reason
            case .backendError(let status): "the backend answered \(status.code) \(status.reasonPhrase)"
            case .failed(let error): error.message
            }
        }
    }

    /// Counts of outcomes since start, by name.
    public struct Counts: Sendable, Equatable {
        public var cached = 0
        public var uncacheable = 0
        public var failed = 0
        /// Action targets dropped because the backlog was full.
        public var dropped = 0
    }

    private struct Job {
        var target: String
        var platform: String
        var followActions: Int
        var forceRefresh: Bool
        var promise: EventLoopPromise<Outcome>
    }

    private struct State {
        var running = 0
        var backlog: CircularBuffer<Job> = []
        var counts = Counts()
        /// Navigation targets queued or running (`target` NUL `platform`), so a storm of components linking to
        /// the same screens prefetches each once.
        var followed: Set<String> = []
        /// Navigation targets whose last prefetch stored nothing (an answer that may not be stored, or none), and
        /// until when they are not followed again: each component stored that links to a personalised or failing
        /// screen would otherwise send the backend another request for it.
        var storedNothing: [String: NIODeadline] = [:]
        /// Set by ``stop()``: nothing new starts.
        var stopped = false
        /// Completed when the last running job ends, once stopped.
        var whenIdle: EventLoopPromise<Void>?
    }

    /// How long a navigation target whose prefetch stored nothing is not followed again.
    public static let storedNothingRecheckInterval = TimeAmount.seconds(60)
    /// The most such targets remembered; past this all are forgotten.
    static let storedNothingCapacity = 4096

    /// Action-driven prefetches beyond this many waiting are dropped (and counted), bounding memory.
    public static let maximumBacklog = 10_000

    private let runtime: ProxyRuntime
    private let eventLoopGroup: any EventLoopGroup
    private let state = Mutex(State())
    /// Each loop's navigation targets found fresh lately, which the components it stores do not ask about again.
    private let recentlyFresh: PerEventLoop<RecentlyFreshTargets>

    /// - Parameter freshTargetRecheckInterval: how long each loop takes a navigation target it found fresh to stay
    ///   fresh without asking the cache (``RecentlyFreshTargets``).
    public init(
        runtime: ProxyRuntime,
        eventLoopGroup: any EventLoopGroup,
        freshTargetRecheckInterval: TimeAmount
    ) {
        self.runtime = runtime
        self.eventLoopGroup = eventLoopGroup
        self.recentlyFresh = PerEventLoop(group: eventLoopGroup) {
            RecentlyFreshTargets(recheckInterval: freshTargetRecheckInterval)
        }
        runtime.context.fetcher.observeStoredComponents(self)
    }

    private var proxy: ProxyContext { runtime.context }

    private var concurrency: Int { proxy.configuration.prefetch.concurrency }

    /// Outcome counts since start.
    public var counts: Counts { state.withLock { $0.counts } }

    /// Resolves `url` (a path, or an absolute URL on the upstream's origin or an allowed host) to a target.
    public func resolve(_ url: String) -> Result<String, PrefetchPlanner.Reason> {
        proxy.prefetchPlanner.resolve(url)
    }

    /// Prefetches `target` for `platform`, following up to `followActions` hops of navigation actions.
    ///
    /// - Parameter forceRefresh: fetch (revalidate) even when a fresh entry exists.
    public func prefetch(
        target: String,
        platform: String,
        followActions: Int,
        forceRefresh: Bool = false
    ) -> EventLoopFuture<Outcome> {
        let promise = eventLoopGroup.any().makePromise(of: Outcome.self)
        let job = Job(
            target: target,
            platform: platform,
            followActions: followActions,
            forceRefresh: forceRefresh,
            promise: promise
        )
        let start = state.withLock { state -> Start in
            guard !state.stopped else { return .refused }
            guard state.running < concurrency else {
                state.backlog.append(job)
                return .later
            }
            state.running += 1
            return .now
        }
        switch start {
        case .now: run(job)
        case .later: break
        case .refused: promise.succeed(.failed(Self.stoppedError))
        }
        return promise.futureResult
    }

    /// Starts nothing more: the backlog's prefetches end as failed, and so does any asked for later. The future
    /// completes once the prefetches already running have ended, which the upstream client's shutdown hastens;
    /// the event loops must run until then.
    func stop() -> EventLoopFuture<Void> {
        let (dropped, whenIdle, idleNow) = state.withLock { state -> ([Job], EventLoopPromise<Void>, Bool) in
            if let whenIdle = state.whenIdle { return ([], whenIdle, false) }
            state.stopped = true
            let dropped = Array(state.backlog)
            state.backlog.removeAll()
            let whenIdle = eventLoopGroup.any().makePromise(of: Void.self)
            state.whenIdle = whenIdle
            return (dropped, whenIdle, state.running == 0)
        }
        for job in dropped { job.promise.succeed(.failed(Self.stoppedError)) }
        if idleNow { whenIdle.succeed() }
        return whenIdle.futureResult
    }

    private enum Start { case now, later, refused }

    private static let stoppedError = ProxyError(.unavailable, "the proxy is shutting down")

    /// `error` in the error model; anything else is a fault of the proxy's, in full for the log.
    private static func proxyError(_ error: any Error) -> ProxyError {
        error as? ProxyError ?? ProxyError(.internalError, "the prefetch failed inside the proxy", detail: "\(error)")
    }

    // MARK: Running jobs

    private func run(_ job: Job) {
        let eventLoop = job.promise.futureResult.eventLoop
        execute(job, on: eventLoop).whenComplete { result in
            let outcome: Outcome
            switch result {
            case .success(let value): outcome = value
            case .failure(let error): outcome = .failed(Self.proxyError(error))
            }
            let (next, idle) = self.state.withLock { state -> (Job?, EventLoopPromise<Void>?) in
                switch outcome {
                case .cached: state.counts.cached += 1
                case .uncacheable: state.counts.uncacheable += 1
                case .backendError, .failed: state.counts.failed += 1
                }
                guard let next = state.backlog.popFirst() else {
                    state.running -= 1
                    return (nil, state.running == 0 ? state.whenIdle : nil)
                }
                return (next, nil)
            }
            switch outcome {
            case .cached: self.proxy.metrics.prefetch(outcome: .cached)
            case .uncacheable: self.proxy.metrics.prefetch(outcome: .uncacheable)
            case .backendError, .failed: self.proxy.metrics.prefetch(outcome: .failed)
            }
            job.promise.succeed(outcome)
            idle?.succeed()
            // Through the event loop, not a nested call: jobs that finish at once (already fresh) would
            // otherwise recurse once per job in the backlog.
            if let next { next.promise.futureResult.eventLoop.execute { self.run(next) } }
        }
    }

    private func execute(_ job: Job, on eventLoop: any EventLoop) -> EventLoopFuture<Outcome> {
        let proxy = self.proxy
        let target: RequestTarget
        do {
            target = try RequestTarget(parsing: job.target)
        } catch {
            return eventLoop.makeSucceededFuture(.failed(ProxyError(.url, error.reason)))
        }
        var clientHeaders = HTTPHeaders()
        clientHeaders.add(name: proxy.configuration.platform.header, value: job.platform)
        // Routed as a client of the platform asking for the target would be, so it keys and fills the same entry.
        guard
            let cacheRequest = proxy.router.cacheRequest(target: target, platform: job.platform, headers: clientHeaders)
        else { return eventLoop.makeSucceededFuture(.uncacheable(reason: "bypass route")) }

        var staleEntry: CachedResponse?
        let now = NIODeadline.now()
        switch proxy.cache.lookup(cacheRequest.key, requestHeaders: clientHeaders, now: now) {
        case .fresh(let entry) where !job.forceRefresh:
            return eventLoop.makeSucceededFuture(.cached(entry, at: now))
        case .fresh(let entry), .stale(let entry):
            staleEntry = entry
        case .miss, .varyMiss:
            break
        }
        let request = proxy.cacheFill(
            key: cacheRequest.key,
            target: target,
            platform: job.platform,
            clientHeaders: clientHeaders,
            clientFields: cacheRequest.fields,
            policy: cacheRequest.policy,
            staleEntry: staleEntry,
            clientAddress: nil,
            clientIsTrustedProxy: false,
            followActions: job.followActions,
            // Made for the clients that will ask: they take codings nobody has asked for yet.
            preparesEveryCoding: true
        )
        return proxy.fetcher.fetch(request, on: eventLoop).map { outcome in
            switch outcome {
            case .stored(let entry), .revalidated(let entry):
                return .cached(entry, at: .now())
            case .servedStale(_, let reason, _):
                return .failed(ProxyError(.network, "the backend failed (\(reason)); the stale entry was kept"))
            case .notStored(let response, let reason):
                if response.status.code >= 400 { return .backendError(status: response.status) }
                return .uncacheable(reason: reason)
            case .invalidated(_, let reason):
                return .uncacheable(reason: reason)
            }
        }.flatMapErrorThrowing { error in
            .failed(Self.proxyError(error))
        }
    }

    // MARK: Screens a user opens next

    /// Whether the cache holds a fresh entry for `target` as a client of `platform` would ask for it;
    /// `headers` are that client's request headers (the platform header alone).
    private func isFresh(
        target: String,
        platform: String,
        headers: HTTPHeaders,
        proxy: ProxyContext,
        now: NIODeadline
    ) -> Bool {
        guard let parsed = try? RequestTarget(parsing: target) else { return false }
        guard let request = proxy.router.cacheRequest(target: parsed, platform: platform, headers: headers) else {
            return false
        }
        return proxy.cache.hasFreshEntry(request.key, requestHeaders: headers, now: now)
    }

    public func componentStored(
        _ plan: PrefetchPlanner.Plan,
        by request: ComponentFetcher.Request,
        on eventLoop: any EventLoop
    ) {
        if !plan.skipped.isEmpty { logSkipped(plan.skipped, from: request) }
        guard !plan.targets.isEmpty else { return }
        let recent = recentlyFresh.value(on: eventLoop)
        let platform = request.key.platform
        let now = NIODeadline.now()
        // Only targets this loop has not found fresh lately are asked about: on a busy proxy, mostly none.
        let unknown = plan.targets.filter {
            $0 != request.key.target && !recent.contains($0, platform: platform, at: now)
        }
        guard !unknown.isEmpty else { return }
        let proxy = self.proxy
        let platformName = String(platform)
        var headers = HTTPHeaders()
        headers.add(name: proxy.configuration.platform.header, value: platformName)
        for target in unknown {
            if isFresh(target: target, platform: platformName, headers: headers, proxy: proxy, now: now) {
                recent.insert(target, platform: platform, at: now)
            } else {
                followNavigation(to: target, platform: platformName, from: request, logger: proxy.logger)
            }
        }
    }

    private func logSkipped(_ skipped: [PrefetchPlanner.Skipped], from request: ComponentFetcher.Request) {
        let logger = proxy.logger
        for skipped in skipped {
            logger.debug(
                "navigation target not prefetched",
                metadata: ["from": "\(request.key.target)", "url": "\(skipped.url)", "reason": "\(skipped.reason)"]
            )
        }
    }

    /// Prefetches a navigation target the cache does not hold fresh, unless it is queued or running already.
    private func followNavigation(
        to target: String,
        platform: String,
        from request: ComponentFetcher.Request,
        logger: Logger
    ) {
        let token = target + "\u{0}" + platform
        let now = NIODeadline.now()
        let admitted = state.withLock { state -> Bool in
            guard !state.followed.contains(token) else { return false }
            if let until = state.storedNothing[token] {
                guard until <= now else { return false }
                state.storedNothing[token] = nil
            }
            guard state.backlog.count < Self.maximumBacklog else {
                state.counts.dropped += 1
                return false
            }
            state.followed.insert(token)
            return true
        }
        guard admitted else { return }
        prefetch(target: target, platform: platform, followActions: request.followActions - 1).whenSuccess {
            outcome in
            self.state.withLock { state in
                state.followed.remove(token)
                if case .cached = outcome { return }
                if state.storedNothing.count >= Self.storedNothingCapacity { state.storedNothing.removeAll() }
                state.storedNothing[token] = .now() + Self.storedNothingRecheckInterval
            }
            logger.debug(
                "prefetched navigation target",
                metadata: ["from": "\(request.key.target)", "target": "\(target)", "outcome": "\(outcome.name)"]
            )
        }
    }
}
