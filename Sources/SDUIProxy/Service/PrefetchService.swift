import ServiceLifecycle

/// The ``Prefetcher`` as a `Service`: it takes prefetches from start-up on (they need no task of their own), and
/// on graceful shutdown, or when the group is cancelled, starts no more: those waiting end as failed, and the
/// service returns once those running have ended, while the event loops they run on still run.
final class PrefetchService: Service, Sendable, CustomStringConvertible {
    let prefetcher: Prefetcher

    init(prefetcher: Prefetcher) {
        self.prefetcher = prefetcher
    }

    var description: String { "PrefetchService" }

    func run() async throws {
        try? await gracefulShutdown()
        try? await prefetcher.stop().get()
    }
}
