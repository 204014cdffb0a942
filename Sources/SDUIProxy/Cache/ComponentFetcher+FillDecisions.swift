import NIOHTTP1
import SDUIProxyCore

// What the fetcher asks of its requests and outcomes to decide a fill: kept apart from the exchange it drives.

extension ComponentFetcher.Request {
    /// What decides this request's fill: made when asked, from fields the request holds anyway, so that the
    /// request keeps no copy.
    func fillPolicy(_ storageRules: StorageRules) -> CacheFillPolicy {
        CacheFillPolicy(
            requestHeaders: clientHeaders,
            requestFields: clientFields,
            defaultTTL: policy.defaultTTLSeconds,
            staleEntry: staleEntry,
            rules: storageRules
        )
    }
}

extension ComponentFetcher.Outcome {
    /// The server error the backend answered the exchange with, when it did: not stored, stored, or stood in for.
    var failedStatus: UInt? {
        switch self {
        case .notStored(let response, _) where response.status.code >= 500: response.status.code
        case .stored(let entry) where entry.status.code >= 500,
            .invalidated(let entry, _) where entry.status.code >= 500:
            entry.status.code
        case .servedStale(_, _, let status): status
        case .stored, .revalidated, .notStored, .invalidated: nil
        }
    }

    /// The outcome as a coalesced run's waiters decide on it.
    var asLeaderOutcome: CacheFillPolicy.LeaderOutcome {
        switch self {
        // An invalidated answer is still the leader's entry for the waiters: they asked before the invalidation.
        case .stored(let entry), .revalidated(let entry), .invalidated(let entry, _): .entry(entry)
        case .servedStale(let entry, let reason, _): .servedStale(entry, because: reason)
        case .notStored(let response, _): .notStored(status: response.status, fields: response.fields)
        }
    }
}
