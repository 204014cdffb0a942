import NIOCore
import Prometheus
import SDUIProxyCore
import Synchronization

/// The proxy's metrics, in Prometheus text format.
///
/// Each instance owns its ``registry`` and makes its metrics there directly (it does not bootstrap the global
/// `MetricsSystem`), so tests and several proxies in one process keep separate numbers.
///
/// Recording is cheap enough for the hit path: a response is counted in its event loop's ``RequestTally``, by
/// index in a small table (no label strings are built or hashed), and counters and gauges are atomics. The cache
/// figures are read from a closure when the metrics are rendered, so the cache does no metrics work at all.
public final class ProxyMetrics: Sendable {
    /// How the cache took part in answering a request (the `cache` label; pass-through requests have none).
    public typealias CacheResult = SDUIProxyCore.CacheResult

    /// What became of a prefetch (the `outcome` label).
    public enum PrefetchOutcome: String, Sendable, CaseIterable {
        /// Fetched and stored.
        case cached
        /// The backend could not be reached or sent an invalid component.
        case failed
        /// Fetched, but the response may not be stored (no-store, an error status, too large).
        case uncacheable
    }

    /// The upper bounds of the upstream latency histogram's buckets.
    public static let upstreamDurationBuckets: [Duration] = [
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
        .microseconds(2_500_000), .seconds(5), .seconds(10),
    ]
    /// ``upstreamDurationBuckets`` in nanoseconds, as the tallies compare a duration with them (the backend's in
    /// ``UpstreamDurationHistogram``, the routes' in ``RouteTally``).
    static let upstreamDurationBucketNanoseconds: [Int64] = upstreamDurationBuckets.map(\.nanosecondsValue)

    /// The registry that holds this instance's metrics but the backend's latency and the per-route ones, which
    /// are counted by each thread apart: ``render()`` writes them all.
    public let registry: PrometheusCollectorRegistry

    /// Each event loop's tally of responses, made when a connection on that loop first asks.
    private let loopTallies = Mutex<[ObjectIdentifier: RequestTally]>([:])
    /// `sdui_upstream_duration_seconds`, counted by each thread in its own tally and rendered after the registry.
    let upstreamDurations = UpstreamDurationHistogram()
    private let upstreamErrors: Mutex<[String: Counter]>
    private let coalescedWaits: Counter
    /// `sdui_cache_fills_invalidated_total{effect}`: discarded, then stored stale.
    private let invalidatedFills: [Counter]
    private let prefetchCounters: [Counter]
    /// `sdui_open_connections{protocol}`: per protocol, and `setup` while a connection's protocol is not known
    /// yet (its TLS handshake, its first bytes).
    private let openConnections: [ConnectionStage: Gauge]
    /// `sdui_connections_total{protocol,tls}`: connections accepted, once their protocol is known.
    private let acceptedConnections: [ConnectionStage: [Counter]]
    /// `sdui_compressions_total{coding,result}`: per stored coding, kept then not smaller.
    private let compressions: [ContentCoding: [Counter]]
    private let compressionsSkipped: Counter
    private let compressionsOnHit: Counter
    private let scrape: Mutex<ScrapeState>

    /// What rendering reads and updates; rendering holds its lock, so two scrapes never interleave.
    private struct ScrapeState {
        var snapshot: (@Sendable () -> Snapshot)?
        /// The per-route metrics' text, appended to the registry's (``setRouteText(_:)``).
        var routeText: (@Sendable () -> String)?
        let cacheEntries: Gauge
        let cacheBytes: Gauge
        let cacheEvictions: Counter
        let cacheHits: Counter
        let cacheMisses: Counter
        let eventLoopYields: Counter
        var queueDepth: Gauge?
        var queueIdentifiers: (pending: Gauge, merges: Counter, dependencyFailed: Counter)?
        let compressionsDropped: Counter
        let partialEntries: Gauge
        let partialHits: Counter
        /// `sdui_cache_body_bytes{encoding}`, per form of ``RequestTally/formLabels``.
        let bodyBytes: [Gauge]
        /// `sdui_cache_responses_by_encoding_total{encoding}`, per form of ``RequestTally/formLabels``.
        let storedForms: [Counter]
        let savedBytes: Counter
        /// `sdui_http2_streams_total`: the loops' counts of streams clients opened, added up.
        let http2Streams: Counter
        /// `sdui_requests_total`, one counter per label combination, made when its first response is rendered.
        var requestCounters = [Counter?](repeating: nil, count: RequestTally.slotCount)
        /// What the tallies held when last rendered, per label combination.
        var renderedRequests = [Int](repeating: 0, count: RequestTally.slotCount)
    }

    /// Makes the metrics on `registry`.
    ///
    /// - Parameter snapshot: read on every ``render()`` for the cache (and queue) figures; it can also be set
    ///   later with ``setSnapshotProvider(_:)``. Without one those metrics stay at zero.
    public init(
        registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
        snapshot: (@Sendable () -> Snapshot)? = nil
    ) {
        self.registry = registry
        self.upstreamErrors = Mutex([:])
        self.coalescedWaits = registry.makeCounter(
            descriptor: Self.descriptor(
                "coalesced_waits",
                unit: "total",
                help: "Requests that joined an identical in-flight backend request instead of sending their own."
            )
        )
        self.invalidatedFills = ["discarded", "stale"].map { effect in
            registry.makeCounter(
                descriptor: Self.descriptor(
                    "cache_fills_invalidated",
                    unit: "total",
                    help:
                        "Cache fills an invalidation reached while in flight: their answers discarded, or stored stale."
                ),
                labels: [("effect", effect)]
            )
        }
        self.prefetchCounters = PrefetchOutcome.allCases.map { outcome in
            registry.makeCounter(
                descriptor: Self.descriptor("prefetch", unit: "total", help: "Prefetches by outcome."),
                labels: [("outcome", outcome.rawValue)]
            )
        }
        self.openConnections = Dictionary(
            uniqueKeysWithValues: ConnectionStage.allCases.map { stage in
                let gauge = registry.makeGauge(
                    descriptor: Self.descriptor(
                        "open_connections",
                        help: "Client connections open on the public listener, by protocol (setup: not known yet)."
                    ),
                    labels: [("protocol", stage.label)]
                )
                return (stage, gauge)
            }
        )
        self.acceptedConnections = Dictionary(
            uniqueKeysWithValues: ClientProtocol.allCases.map(ConnectionStage.init).map { stage in
                let counters = ["false", "true"].map { tls in
                    registry.makeCounter(
                        descriptor: Self.descriptor(
                            "connections",
                            unit: "total",
                            help: "Client connections the public listener accepted, by protocol and TLS."
                        ),
                        labels: [("protocol", stage.label), ("tls", tls)]
                    )
                }
                return (stage, counters)
            }
        )
        self.compressions = Dictionary(
            uniqueKeysWithValues: ContentCoding.stored.map { coding in
                let counters = ["kept", "not_smaller"].map { result in
                    registry.makeCounter(
                        descriptor: Self.descriptor(
                            "compressions",
                            unit: "total",
                            help: "Stored bodies compressed, by coding: kept, or dropped for not being smaller."
                        ),
                        labels: [("coding", coding.rawValue), ("result", result)]
                    )
                }
                return (coding, counters)
            }
        )
        self.compressionsSkipped = registry.makeCounter(
            descriptor: Self.descriptor(
                "compressions_skipped",
                unit: "total",
                help: "Stored bodies left uncompressed because the compression pool was full."
            )
        )
        self.compressionsOnHit = registry.makeCounter(
            descriptor: Self.descriptor(
                "compressions_on_hit",
                unit: "total",
                help:
                    "Stored bodies sent to be compressed by a hit whose client takes a coding the entry does not keep yet."
            )
        )
        self.scrape = Mutex(
            ScrapeState(
                snapshot: snapshot,
                cacheEntries: registry.makeGauge(
                    descriptor: Self.descriptor("cache_entries", help: "Entries in the cache.")
                ),
                cacheBytes: registry.makeGauge(
                    descriptor: Self.descriptor("cache_bytes", help: "Bytes the cache entries take.")
                ),
                cacheEvictions: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "cache_evictions",
                        unit: "total",
                        help: "Entries evicted to stay inside the cache's budget."
                    )
                ),
                cacheHits: registry.makeCounter(
                    descriptor: Self.descriptor("cache_hits", unit: "total", help: "Cache lookups that found an entry.")
                ),
                cacheMisses: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "cache_misses",
                        unit: "total",
                        help: "Cache lookups that found no usable entry."
                    )
                ),
                eventLoopYields: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "event_loop_yields",
                        unit: "total",
                        help:
                            "Times a busy event loop let a thread waiting for its core run (eventLoops.yieldAfter)."
                    )
                ),
                queueDepth: nil,
                compressionsDropped: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "compressions_dropped",
                        unit: "total",
                        help: "Compressions that finished after their entry was replaced or removed, and were dropped."
                    )
                ),
                partialEntries: registry.makeGauge(
                    descriptor: Self.descriptor(
                        "cache_partial_entries",
                        help: "Keys holding parts of a representation, not all of it (RFC 9111 section 3.3)."
                    )
                ),
                partialHits: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "cache_partial_hits",
                        unit: "total",
                        help: "Range requests answered from held parts of a representation."
                    )
                ),
                bodyBytes: RequestTally.formLabels.map { form in
                    registry.makeGauge(
                        descriptor: Self.descriptor(
                            "cache_body_bytes",
                            help: "Bytes of the stored bodies, by form: identity, and each content coding kept."
                        ),
                        labels: [("encoding", form)]
                    )
                },
                storedForms: RequestTally.formLabels.map { form in
                    registry.makeCounter(
                        descriptor: Self.descriptor(
                            "cache_responses_by_encoding",
                            unit: "total",
                            help: "Stored responses sent to clients, by the form sent: identity or a content coding."
                        ),
                        labels: [("encoding", form)]
                    )
                },
                savedBytes: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "compression_saved_bytes",
                        unit: "total",
                        help: "Body bytes not sent because a stored response went out compressed."
                    )
                ),
                http2Streams: registry.makeCounter(
                    descriptor: Self.descriptor(
                        "http2_streams",
                        unit: "total",
                        help: "HTTP/2 streams clients opened on the public listener, answered or reset."
                    )
                )
            )
        )
    }

    /// Sets the closure whose text (the per-route metrics of the configuration in force) ``render()`` appends.
    func setRouteText(_ text: @escaping @Sendable () -> String) {
        scrape.withLock { $0.routeText = text }
    }

    /// Sets (or replaces) the closure ``render()`` reads the cache and queue figures from.
    public func setSnapshotProvider(_ provider: @escaping @Sendable () -> Snapshot) {
        scrape.withLock { $0.snapshot = provider }
    }

    // MARK: Recording

    /// The tally a connection on `eventLoop` counts its responses in (`sdui_requests_total{method,status_class,
    /// cache}`): that loop's own.
    public func requestTally(for eventLoop: any EventLoop) -> RequestTally {
        loopTallies.withLock { tallies in
            if let tally = tallies[ObjectIdentifier(eventLoop)] { return tally }
            let tally = RequestTally()
            tallies[ObjectIdentifier(eventLoop)] = tally
            return tally
        }
    }

    /// Records the time one backend request took, to its complete response: a `TimeAmount`, as the loop's clock
    /// measures it, since making a `Duration` of it and reading its nanoseconds back cost a 128-bit division.
    public func upstreamCompleted(after elapsed: TimeAmount) {
        upstreamDurations.record(nanoseconds: elapsed.nanoseconds)
    }

    /// Counts a backend request that failed: `sdui_upstream_errors_total{kind}`, the kind of the error model
    /// (`network`, `timeout`, `decoding`, ...).
    public func upstreamFailed(kind: ProxyError.Kind) {
        let label = kind.description
        let counter = upstreamErrors.withLock { counters in
            if let counter = counters[label] { return counter }
            let counter = registry.makeCounter(
                descriptor: Self.descriptor(
                    "upstream_errors",
                    unit: "total",
                    help: "Backend requests that failed, by the kind of error."
                ),
                labels: [("kind", label)]
            )
            counters[label] = counter
            return counter
        }
        counter.increment()
    }

    /// Counts a request that waited for an identical in-flight backend request: `sdui_coalesced_waits_total`.
    public func coalescedWait() {
        coalescedWaits.increment()
    }

    /// Counts a fill that an invalidation reached while it was in flight:
    /// `sdui_cache_fills_invalidated_total{effect="discarded"}` when its answer was not stored, `effect="stale"` when
    /// a soft one had it stored stale.
    public func fillInvalidated(discarded: Bool) {
        invalidatedFills[discarded ? 0 : 1].increment()
    }

    /// Counts a body compressed for storing: `sdui_compressions_total{coding,result}`, `result="kept"` when the
    /// coded body was smaller and kept, `"not_smaller"` when it was dropped.
    public func compression(_ coding: ContentCoding, kept: Bool) {
        compressions[coding]?[kept ? 0 : 1].increment()
    }

    /// Counts a body left uncompressed because the compression pool was full: `sdui_compressions_skipped_total`.
    public func compressionSkipped() {
        compressionsSkipped.increment()
    }

    /// Counts a stored body sent to be compressed by a hit whose client takes a coding the entry does not keep yet
    /// (never asked for, or its compression skipped, the pool being full): `sdui_compressions_on_hit_total`.
    public func compressionOnHit() {
        compressionsOnHit.increment()
    }

    /// Counts a prefetch: `sdui_prefetch_total{outcome}`.
    public func prefetch(outcome: PrefetchOutcome) {
        switch outcome {
        case .cached: prefetchCounters[0].increment()
        case .failed: prefetchCounters[1].increment()
        case .uncacheable: prefetchCounters[2].increment()
        }
    }

    /// Where a public connection is: setting up (its protocol not known yet), or speaking one.
    public enum ConnectionStage: Sendable, CaseIterable {
        case setup
        case http1
        case http2

        init(_ clientProtocol: ClientProtocol) {
            switch clientProtocol {
            case .http1: self = .http1
            case .http2: self = .http2
            }
        }

        var label: String {
            switch self {
            case .setup: "setup"
            case .http1: ClientProtocol.http1.label
            case .http2: ClientProtocol.http2.label
            }
        }
    }

    /// A client connection was accepted: `sdui_open_connections{protocol="setup"}` goes up by one.
    public func connectionOpened() {
        openConnections[.setup]?.increment()
    }

    /// A connection's protocol is known: it moves from `setup` to `clientProtocol`, and is counted in
    /// `sdui_connections_total`.
    public func connectionSpeaks(_ clientProtocol: ClientProtocol, overTLS: Bool) {
        let stage = ConnectionStage(clientProtocol)
        openConnections[.setup]?.decrement()
        openConnections[stage]?.increment()
        acceptedConnections[stage]?[overTLS ? 1 : 0].increment()
    }

    /// A client connection closed, in `stage`: its gauge goes down by one.
    public func connectionClosed(in stage: ConnectionStage = .setup) {
        openConnections[stage]?.decrement()
    }

    /// The stored responses sent in each form so far (identity and each coding), and the body bytes the coded
    /// ones saved: the tallies of every loop, added up.
    public func storedFormsSent() -> (byForm: [String: Int], savedBytes: Int) {
        let tallies = loopTallies.withLock { Array($0.values) }
        var byForm: [String: Int] = [:]
        for tally in tallies {
            for (form, count) in zip(RequestTally.formLabels, tally.storedForms()) { byForm[form, default: 0] += count }
        }
        return (byForm, tallies.reduce(0) { $0 + $1.savedBytes })
    }

    // MARK: Rendering

    /// Every metric in the Prometheus text exposition format (version 0.0.4), with the cache figures read
    /// from the snapshot provider just before.
    public func render() -> String {
        scrape.withLock { state in
            if let provider = state.snapshot {
                let snapshot = provider()
                state.cacheEntries.set(Double(snapshot.cacheEntries))
                state.cacheBytes.set(Double(snapshot.cacheBytes))
                Self.setCounter(state.cacheEvictions, to: snapshot.cacheEvictions)
                Self.setCounter(state.cacheHits, to: snapshot.cacheHits)
                Self.setCounter(state.cacheMisses, to: snapshot.cacheMisses)
                Self.setCounter(state.eventLoopYields, to: snapshot.eventLoopYields)
                Self.setCounter(state.compressionsDropped, to: snapshot.compressionsDropped)
                state.partialEntries.set(Double(snapshot.partialEntries))
                Self.setCounter(state.partialHits, to: snapshot.partialHits)
                for (index, form) in RequestTally.formLabels.enumerated() {
                    state.bodyBytes[index].set(Double(snapshot.bodyBytesByForm[form] ?? 0))
                }
                if let depth = snapshot.queueDepth {
                    if state.queueDepth == nil {
                        state.queueDepth = registry.makeGauge(
                            descriptor: Self.descriptor("queue_depth", help: "Writes waiting in the durable queue.")
                        )
                    }
                    state.queueDepth?.set(Double(depth))
                }
                if let identifiers = snapshot.queueIdentifiers {
                    let metrics =
                        state.queueIdentifiers ?? (
                            registry.makeGauge(
                                descriptor: Self.descriptor(
                                    "queue_pending_local_ids",
                                    help: "Local identifiers whose queued creates have no outcome yet."
                                )
                            ),
                            registry.makeCounter(
                                descriptor: Self.descriptor(
                                    "queue_identifier_merges",
                                    unit: "total",
                                    help: "Queued writes given the backend's identifier in place of a local one."
                                )
                            ),
                            registry.makeCounter(
                                descriptor: Self.descriptor(
                                    "queue_dependency_failed",
                                    unit: "total",
                                    help: "Queued writes never sent because a create they name failed."
                                )
                            )
                        )
                    state.queueIdentifiers = metrics
                    metrics.pending.set(Double(identifiers.pending))
                    Self.setCounter(metrics.merges, to: identifiers.merges)
                    Self.setCounter(metrics.dependencyFailed, to: identifiers.dependencyFailed)
                }
            }
            addTallies(into: &state)
            return registry.emitToString() + upstreamDurations.render() + (state.routeText?() ?? "")
        }
    }

    /// The content type of ``render()``'s output.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    // MARK: Labels

    /// Adds what the tallies counted since the last rendering to the registry's request counters.
    private func addTallies(into state: inout ScrapeState) {
        let tallies = loopTallies.withLock { Array($0.values) }
        // Mirrors of the tallies' totals, like the cache's figures: the tallies only grow.
        let sent = storedFormsSent()
        for (index, form) in RequestTally.formLabels.enumerated() {
            Self.setCounter(state.storedForms[index], to: sent.byForm[form] ?? 0)
        }
        Self.setCounter(state.savedBytes, to: sent.savedBytes)
        Self.setCounter(state.http2Streams, to: tallies.reduce(0) { $0 + $1.streamsOpened })
        for slot in 0..<RequestTally.slotCount {
            let total = tallies.reduce(0) { $0 + $1.count(inSlot: slot) }
            let added = total - state.renderedRequests[slot]
            guard added > 0 else { continue }
            let counter = state.requestCounters[slot] ?? makeRequestCounter(slot: slot)
            state.requestCounters[slot] = counter
            counter.increment(by: Int64(added))
            state.renderedRequests[slot] = total
        }
    }

    private func makeRequestCounter(slot: Int) -> Counter {
        let labels = RequestTally.labels(ofSlot: slot)
        return registry.makeCounter(
            descriptor: Self.descriptor(
                "requests",
                unit: "total",
                help: "Responses sent to clients, by method, status class, how the cache took part and protocol."
            ),
            labels: [
                ("method", labels.method), ("status_class", labels.statusClass), ("cache", labels.cache),
                ("protocol", labels.protocol),
            ]
        )
    }

    /// `sdui_<name>[_<unit>]`, with its help text.
    private static func descriptor(_ name: String, unit: String = "", help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "sdui", metricName: name, unitName: unit, helpText: help)
    }

    /// Sets a counter that mirrors a monotonic figure kept elsewhere (the cache's own statistics).
    private static func setCounter(_ counter: Counter, to value: Int) {
        counter.reset()
        counter.increment(by: Int64(max(0, value)))
    }
}
