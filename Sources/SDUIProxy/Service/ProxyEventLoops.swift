import NIOCore
import NIOPosix
import SDUIProxyCore

/// The event loop group a ``ProxyServer`` started without one makes for itself: `eventLoops.count` loops, by
/// default one per core the process may use, each yielding its core when it has kept it for
/// `eventLoops.yieldAfter` (``BusyLoopYielding``).
struct ProxyEventLoops: Sendable {
    let group: MultiThreadedEventLoopGroup
    /// Nil when `eventLoops.yieldAfter` is zero.
    let yielding: BusyLoopYielding?

    /// `eventLoops.yieldAfter` as the config file writes it, or `never`, for the start-up log.
    let yieldAfterDescription: String

    init(_ configuration: ProxyConfiguration.EventLoops) {
        yieldAfterDescription =
            configuration.yieldAfter > .zero ? "\(configuration.yieldAfter.timeAmount.nanoseconds / 1000)us" : "never"
        // NIO's count honours the container's CPU quota and cpuset.
        let count = configuration.count > 0 ? configuration.count : System.coreCount
        group = MultiThreadedEventLoopGroup(numberOfThreads: count)
        yielding =
            configuration.yieldAfter > .zero
            ? BusyLoopYielding(group: group, yieldAfter: configuration.yieldAfter.timeAmount) : nil
    }
}
