import NIOCore

extension ProxyServer {
    /// Settings no deployment has reason to change, which tests set so that what they check does not hang on
    /// how fast the machine runs them.
    struct Tuning {
        /// How long a loop takes a navigation target it found fresh to stay fresh (``RecentlyFreshTargets``).
        var freshTargetRecheckInterval = RecentlyFreshTargets.defaultRecheckInterval
        /// The admin listener's connection cap: enough for operators and probes, few enough that connections
        /// without the token cannot take the process's descriptors.
        var maximumAdminConnections = 256
        /// How long an admin connection may wait before its first request (``AdminGate``).
        var adminFirstRequestTimeout = AdminGate.defaultFirstRequestTimeout
        /// How long a purge or a fleet prefetch waits for the fleet's log to take it before answering `pending`
        /// (``FleetLog/Settings/recordWait``).
        var fleetRecordWait = FleetLog.Settings.defaultRecordWait
        /// How long a query of the fleet's log may take before its connection is taken for dead
        /// (``FleetLog/Settings/queryTimeout``).
        var fleetQueryTimeout = FleetLog.Settings.defaultQueryTimeout
        /// Runs the warm-up's refreshes and retries; nil runs them on the event loops' timers.
        var warmUpScheduler: WarmUp.Scheduler? = nil
        /// Compresses stored bodies, not yet started (the server starts it, and shuts it down); nil makes the
        /// proxy's own, on half the cores.
        var compressionPool: CompressionPool? = nil
        /// Makes the requests' spans in place of the tracer `tracing` configures; tests hand in an in-memory one.
        var tracer: RequestTracer? = nil
    }
}
