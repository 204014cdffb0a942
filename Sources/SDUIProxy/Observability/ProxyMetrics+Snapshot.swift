import SDUIProxyCore

extension ProxyMetrics {
    /// The figures read at render time.
    public struct Snapshot: Sendable, Equatable {
        /// Entries in the cache (`sdui_cache_entries`).
        public var cacheEntries: Int
        /// Bytes the entries take (`sdui_cache_bytes`).
        public var cacheBytes: Int
        /// Evictions since start (`sdui_cache_evictions_total`).
        public var cacheEvictions: Int
        /// Lookups that found a usable entry since start (`sdui_cache_hits_total`).
        public var cacheHits: Int
        /// Lookups that found none since start (`sdui_cache_misses_total`).
        public var cacheMisses: Int
        /// The durable write queue's depth; nil when there is no queue (the metric is then left out).
        public var queueDepth: Int?
        /// Local identifiers whose creates have no outcome yet (`sdui_queue_pending_local_ids`), writes given
        /// backend identifiers (`sdui_queue_identifier_merges_total`) and writes ended `dependencyFailed`
        /// (`sdui_queue_dependency_failed_total`); nil when no queue route has `creates`.
        public var queueIdentifiers: QueueIdentifierFigures?

        /// The write queue's figures about local identifiers.
        public struct QueueIdentifierFigures: Sendable, Equatable {
            public var pending: Int
            public var merges: Int
            public var dependencyFailed: Int

            public init(pending: Int, merges: Int, dependencyFailed: Int) {
                self.pending = pending
                self.merges = merges
                self.dependencyFailed = dependencyFailed
            }
        }
        /// How often a busy event loop let a thread waiting for its core run (`sdui_event_loop_yields_total`).
        public var eventLoopYields = 0
        /// The bytes of the stored bodies in each form, identity and each coding (`sdui_cache_body_bytes{encoding}`).
        public var bodyBytesByForm: [String: Int] = [:]
        /// Compressions that found their entry replaced or gone, and were dropped
        /// (`sdui_compressions_dropped_total`).
        public var compressionsDropped = 0
        /// Keys holding parts of a representation (`sdui_cache_partial_entries`).
        public var partialEntries = 0
        /// Ranges answered from held parts (`sdui_cache_partial_hits_total`).
        public var partialHits = 0

        /// Creates a snapshot from figures gathered by the caller.
        public init(
            cacheEntries: Int = 0,
            cacheBytes: Int = 0,
            cacheEvictions: Int = 0,
            cacheHits: Int = 0,
            cacheMisses: Int = 0,
            queueDepth: Int? = nil
        ) {
            self.cacheEntries = cacheEntries
            self.cacheBytes = cacheBytes
            self.cacheEvictions = cacheEvictions
            self.cacheHits = cacheHits
            self.cacheMisses = cacheMisses
            self.queueDepth = queueDepth
        }

        /// The cache's figures from its statistics.
        public init(_ statistics: ResponseCache.Statistics, queueDepth: Int? = nil) {
            self.init(
                cacheEntries: statistics.entries,
                cacheBytes: statistics.bytes,
                cacheEvictions: statistics.evictions,
                cacheHits: statistics.hits,
                cacheMisses: statistics.misses,
                queueDepth: queueDepth
            )
            bodyBytesByForm = statistics.bodyBytesByForm
            compressionsDropped = statistics.compressionsDropped
            partialEntries = statistics.partialEntries
            partialHits = statistics.partialHits
        }
    }
}
