import NIOCore

/// When `prefetch.refresh` fetches a declared URL again, from what came of its last fetch.
///
/// A stored answer sets the interval: the URL is fetched again when a tenth of its lifetime (at least a second)
/// is left. A refresh that stores nothing keeps that interval, so one bad answer does not let the URL go cold.
/// Before anything was stored, a failed fetch is tried again after 1, 2, 4 ... seconds, at most
/// ``longestRetry`` apart, so a backend that was down at start-up still gets its declared URLs warmed once it
/// is back; an answer that may not be stored is not asked for again.
struct RefreshSchedule: Equatable {
    /// The time between refreshes, once an answer with a lifetime was stored.
    let interval: TimeAmount?
    /// Failed fetches in a row before anything was stored.
    let failuresBeforeStoring: Int

    init(interval: TimeAmount? = nil, failuresBeforeStoring: Int = 0) {
        self.interval = interval
        self.failuresBeforeStoring = failuresBeforeStoring
    }

    static let longestRetry = TimeAmount.seconds(60)

    /// What comes next after a fetch ended in `outcome`.
    enum Next: Equatable {
        /// Fetch again after `delay`, going on with `schedule`.
        case fetch(after: TimeAmount, schedule: RefreshSchedule)
        /// Do not fetch again.
        case stop
    }

    func next(after outcome: Prefetcher.Outcome) -> Next {
        if case .cached(_, let freshFor, let lifetime) = outcome, lifetime > 0 {
            let margin = max(1, lifetime / 10)
            // An answer can arrive with no whole second of its lifetime left (it was slow, or came with an Age):
            // it is fetched again after the margin, not at once, and not never.
            let delay = TimeAmount.seconds(freshFor > 0 ? max(1, freshFor - margin) : margin)
            return .fetch(after: delay, schedule: RefreshSchedule(interval: .seconds(max(1, lifetime - margin))))
        }
        if let interval { return .fetch(after: interval, schedule: self) }
        guard outcome.isFailure else { return .stop }
        let retry = min(Self.longestRetry, .seconds(1 << min(failuresBeforeStoring, 6)))
        return .fetch(after: retry, schedule: RefreshSchedule(failuresBeforeStoring: failuresBeforeStoring + 1))
    }

    /// Whether the next fetch is a refresh of a stored answer, to be asked of the backend even while fresh.
    var refreshesStoredAnswer: Bool { interval != nil }
}
