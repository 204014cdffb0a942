import NIOCore
import Synchronization

/// Lets the threads waiting for a busy event loop's core run, once the loop has kept that core for
/// `eventLoops.yieldAfter` (``ProxyConfiguration/EventLoops/yieldAfter``): a ``BusyLoopYielder`` for each loop of
/// the group, and what they count.
///
/// Linux takes the core from a thread that never blocks only at its scheduler tick, every 4 ms at 250 Hz. A loop
/// under steady load always finds more sockets ready, so it never blocks, and a thread waiting for the same core
/// (the other loop, a client on the same machine, a sidecar) waits out the tick; every connection on a waiting
/// loop waits with it. That wait was most of the proxy's p99 on a 2-core machine whose clients shared the cores.
///
/// A loop judges its windows where its client connections flush what a turn read from them (HTTP/1.1 and HTTP/2
/// alike), not after every turn as a `NIOEventLoopMetricsDelegate` would: with a delegate set, swift-nio reads the
/// clock and copies the delegate's state through unspecialised code on every turn, about 1,000 instructions each
/// (about 600 a hit on one connection). So a loop busy with no client connection's reads (a warm-up's or the
/// prefetcher's fills alone, a long pass-through download, TLS handshakes) does not yield; one that serves clients
/// judges its windows with every answer it flushes.
final class BusyLoopYielding: Sendable {
    private let yielders: EventLoopTable<BusyLoopYielder>
    private let counts: Counts

    /// A yielder for each loop of `group`.
    init(group: any EventLoopGroup, yieldAfter: TimeAmount) {
        let counts = Counts()
        self.counts = counts
        yielders = EventLoopTable(group: group) { eventLoop in
            BusyLoopYielder(eventLoop: eventLoop, yieldAfter: yieldAfter.nanoseconds, counts: counts)
        }
    }

    /// The yielder of `eventLoop`, for the connections on it; nil for a loop outside the group.
    func yielder(for eventLoop: any EventLoop) -> BusyLoopYielder? {
        yielders[eventLoop]
    }

    /// How often a loop has offered its core: on a core of its own, nothing takes it.
    var yieldCallCount: Int { counts.yielded.load(ordering: .relaxed) }

    /// How often another thread did run when a loop offered its core (`sdui_event_loop_yields_total`): a count
    /// that climbs says the loops share their cores with other busy threads.
    var yieldCount: Int { counts.gaveWay.load(ordering: .relaxed) }

    /// What the group's yielders count, each loop adding to the same totals (rarely: at most once a window).
    final class Counts: Sendable {
        /// `sched_yield` calls.
        let yielded = Atomic<Int>(0)
        /// Those after which the loop had been off its core (``BusyLoopYielder/gaveWayThreshold``).
        let gaveWay = Atomic<Int>(0)
    }
}
