import NIOCore
import SDUIProxyCore

/// Hears of every component the fetcher stores that mentions `shouldPrefetch`, with its prefetch plan (made
/// in the same pass over the body that validates it, by the fetcher's planner), on the event loop of the fetch,
/// once the fetch's caller has been handed its outcome.
public protocol StoredComponentObserver: AnyObject, Sendable {
    func componentStored(
        _ plan: PrefetchPlanner.Plan,
        by request: ComponentFetcher.Request,
        on eventLoop: any EventLoop
    )
}
