import Foundation
import Logging
import NIOCore
import PostgresNIO
import SDUIProxyCore
import Synchronization

extension FleetLog {
    /// The fleet's log for `configuration`, or nil for a single replica (no `cluster.postgres`).
    ///
    /// Rows of other replicas apply to `cache` directly, and their fleet prefetches run through the prefetcher that
    /// `prefetcher` holds by then (it is made after the log, from the context the log's invalidator is part of).
    static func make(
        for configuration: ProxyConfiguration,
        recordWait: Duration,
        queryTimeout: Duration = Settings.defaultQueryTimeout,
        cache: ResponseCache,
        prefetcher: PrefetcherSlot,
        metrics: ProxyMetrics,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) throws -> FleetLog? {
        guard let url = configuration.cluster.postgres else { return nil }
        let replicaName = configuration.cluster.replicaNameOfThisProcess
        var logger = logger
        logger[metadataKey: "replica"] = "\(replicaName)"
        let prefetchLogger = logger
        var settings = Settings(replicaName: replicaName)
        settings.recordWait = recordWait
        settings.queryTimeout = queryTimeout
        return FleetLog(
            configuration: try PostgresConnectionSettings.connectionConfiguration(
                url,
                applicationName: "sdui-proxy \(replicaName)"
            ),
            settings: settings,
            appliers: Appliers(
                // Through the cache, as every invalidation: it reaches the fills in flight here too.
                invalidate: { invalidation in cache.invalidate(invalidation, now: .now()).responses },
                prefetch: { prefetch in
                    guard let prefetcher = prefetcher.prefetcher else { return }
                    prefetchLogger.info(
                        "running a fleet prefetch",
                        metadata: ["urls": "\(prefetch.urls.count)", "platforms": "\(prefetch.platforms)"]
                    )
                    _ = PrefetchEndpoint.run(
                        urls: prefetch.urls,
                        platforms: prefetch.platforms,
                        followActions: prefetch.followActions,
                        prefetcher: prefetcher,
                        on: eventLoopGroup.any()
                    )
                }
            ),
            eventLoop: eventLoopGroup.any(),
            logger: logger,
            metrics: ClusterMetrics(registry: metrics.registry)
        )
    }

    /// The prefetcher fleet prefetches run through, set once it exists.
    final class PrefetcherSlot: Sendable {
        private let slot = Mutex<Prefetcher?>(nil)

        var prefetcher: Prefetcher? {
            get { slot.withLock { $0 } }
            set { slot.withLock { $0 = newValue } }
        }
    }
}

extension ClusterConfiguration {
    /// `replicaName`, or this host's name and process id when it is empty.
    public var replicaNameOfThisProcess: String {
        resolvedReplicaName(hostName: ProcessInfo.processInfo.hostName, processID: getpid())
    }
}
