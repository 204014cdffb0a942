/// The whole configuration of a proxy, as read from the config file, the environment and flags.
///
/// Every value has a default; the loader still requires the file, the environment or a flag to name `upstream.url`
/// (``ConfigurationLoader``), so that no deployment serves the bundled sample screens by accident.
public struct ProxyConfiguration: Sendable, Equatable {
    public var listen = ListenAddress(host: "0.0.0.0", port: 8080)
    /// `listen.trustedProxies`: the load balancers and proxies in front of this one. A connection from one of
    /// these keeps its `X-Forwarded-*` and `Forwarded` headers (this hop is appended); from anywhere else they
    /// are replaced by what the proxy saw.
    public var trustedProxies: [IPAddressRange] = []
    /// `listen.tls`, `listen.http2`, `listen.http2Limits`: what the public listener speaks (the admin listener
    /// speaks clear-text HTTP/1.1 only).
    public var listenProtocols = ListenerProtocols()
    public var admin = ListenAddress(host: "127.0.0.1", port: 9090)
    /// `admin.probesOpen`: whether `/health` and `/ready` answer without the admin token. They reveal nothing, and
    /// the probes of an orchestrator (Kubernetes, a load balancer) carry no secrets.
    public var adminProbesOpen = true
    public var upstream = Upstream()
    public var platform = Platform()
    /// Headers added to every upstream request, after the client's end-to-end headers: ``defaultHeaders`` with
    /// the configured ones added (a configured name replaces the default of that name; an empty value removes it).
    public var headers: [(name: String, value: String)] = ProxyConfiguration.defaultHeaders

    /// The headers sent when the configuration names none.
    public static let defaultHeaders: [(name: String, value: String)] = [("Content-Type", "application/json")]
    public var cache = Cache()
    public var prefetch = Prefetch()
    public var log = Log()
    public var compat = Compatibility()
    public var limits = Limits()
    public var eventLoops = EventLoops()
    /// The durable write queue; nil (no `queue` section) turns it off.
    public var queue: QueueConfiguration?
    /// Replicas sharing a PostgreSQL database; without `cluster.postgres`, a single node.
    public var cluster = ClusterConfiguration()
    /// The codings responses are stored in besides their own, and which responses are.
    public var compression = CompressionConfiguration()
    /// Per-route metrics.
    public var metrics = MetricsConfiguration()
    /// Spans per request through OpenTelemetry; off unless a collector is named.
    public var tracing = TracingConfiguration()

    public init() {}

    public static func == (lhs: ProxyConfiguration, rhs: ProxyConfiguration) -> Bool {
        lhs.listen == rhs.listen && lhs.trustedProxies == rhs.trustedProxies
            && lhs.listenProtocols == rhs.listenProtocols && lhs.admin == rhs.admin
            && lhs.adminProbesOpen == rhs.adminProbesOpen
            && lhs.upstream == rhs.upstream
            && lhs.platform == rhs.platform && lhs.headers.map(\.name) == rhs.headers.map(\.name)
            && lhs.headers.map(\.value) == rhs.headers.map(\.value) && lhs.cache == rhs.cache
            && lhs.prefetch == rhs.prefetch && lhs.log == rhs.log && lhs.compat == rhs.compat
            && lhs.limits == rhs.limits && lhs.eventLoops == rhs.eventLoops && lhs.queue == rhs.queue
            && lhs.cluster == rhs.cluster && lhs.compression == rhs.compression && lhs.metrics == rhs.metrics
            && lhs.tracing == rhs.tracing
    }

    /// A host and port to listen on.
    public struct ListenAddress: Sendable, Equatable {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    /// The component backend.
    public struct Upstream: Sendable, Equatable {
        /// `http://host:port/base` for a real backend, or `file:DIRECTORY` for the file-backed one. A loaded
        /// configuration always names it (the loader refuses one that does not); this value is the bundled
        /// config's, for configurations built in code.
        public var url = "file:config/samples"
        /// How long connecting may take.
        public var connectTimeout: Duration = .seconds(2)
        /// How long the backend may take to answer a request with its response head (from when it has the whole
        /// request, connecting included) before the client gets a 504.
        public var timeout: Duration = .seconds(5)
        /// How long the backend may go silent while it sends a response body; then the exchange fails (a cache
        /// fill's client gets a 504, a streamed response is cut short). A client that takes no part of a
        /// forwarded response for as long is cut off too.
        public var bodyIdleTimeout: Duration = .seconds(30)
        /// Connections kept per event loop to the backend, cache fills and pass-through together.
        public var maxConnections = 64
        /// Of ``maxConnections``, the most that forwarded requests (and uploads streamed as they come) hold at once
        /// per event loop; the rest stay for cache fills. Nil is half of ``maxConnections`` (at least one): see
        /// ``forwardConnectionLimit``.
        public var maxForwardConnections: Int?
        /// For an `https://` backend: a PEM file of the certificates its certificate must chain to, trusted instead
        /// of the system's roots (a private CA). Nil trusts the system's.
        public var caFile: String?
        /// The largest response body read into memory for a component request; a larger one is streamed to the
        /// client and not stored.
        public var maxResponseBytes = 8 << 20
        /// The most response body bytes all cache fills together hold in memory at once; a fill that would go past
        /// it is streamed to its client instead, and not stored. At least `maxResponseBytes`.
        public var maxBufferedBytes = 64 << 20

        public init() {}

        /// The forwards' share of the pool in force: ``maxForwardConnections``, or half of ``maxConnections``.
        public var forwardConnectionLimit: Int {
            maxForwardConnections ?? Self.defaultForwardConnections(maxConnections: maxConnections)
        }

        /// `upstream.maxForwardConnections` when the file does not say: half the pool, at least one connection.
        public static func defaultForwardConnections(maxConnections: Int) -> Int {
            max(1, maxConnections / 2)
        }
    }

    /// How the client's platform is read and passed on.
    public struct Platform: Sendable, Equatable {
        /// The request header that carries the platform, both from clients and to the backend.
        public var header = "beagle-platform"
        /// The platform assumed when a client sends none.
        public var defaultValue = "WEB"
        /// The values clients may send (compared without regard to case); empty allows any token.
        public var allowed = ["IOS", "ANDROID", "WEB"]

        public init() {}
    }

    /// The response cache.
    public struct Cache: Sendable, Equatable {
        /// The byte budget of all stored entries (headers and bodies).
        public var maxBytes = 256 << 20
        /// The most entries kept, whatever their size.
        public var maxEntries = 1_000_000
        /// The policy for paths no route matches.
        public var policy = RoutePolicy()
        /// Per path prefix overrides of ``policy``; the longest matching prefix wins.
        public var routes: [Route] = []
        /// The response header whose space-separated values tag entries for purging.
        public var tagHeader = "Surrogate-Key"
        /// Whether clients see the ``tagHeader`` field. Off, it is left out of what they are sent (the tags are
        /// still recorded for purging): the tags are the operator's vocabulary.
        public var exposeTags = false
        /// What is stored, and for how long, beyond what each response says: targeted fields
        /// (`targetedFields`), heuristic freshness (`heuristic`), the cap on errors (`maxErrorTTL`) and
        /// `storeSetCookie`.
        public var storageRules = StorageRules()
        /// Whether a client's `no-cache` or `max-age=0` makes a fresh entry be revalidated with the backend. Off,
        /// they are ignored, so that clients cannot turn hits into backend requests.
        public var honorClientNoCache = false
        /// This cache's name in `Cache-Status` (RFC 9211), an sf-token.
        public var name = "sdui-proxy"
        /// Whether responses on the cache path also carry `X-Cache`, for clients that read it.
        public var xCacheHeader = true
        /// Whether `Cache-Status` carries the cache key (`key=`), for debugging.
        public var cacheStatusKey = false
        /// What a range request that finds nothing stored asks the backend for (``RangeMiss``).
        public var rangeMiss = RangeMiss.whole
        /// The most separate parts held of one representation (RFC 9111 section 3.3), so that a client's ranges
        /// cannot fragment the cache: a part that would make more is served and not kept.
        public var maxPartsPerEntry = 16

        public init() {}

        /// What a range request that finds nothing stored asks the backend for.
        public enum RangeMiss: String, Sendable, Equatable, CaseIterable {
            /// The whole representation, stored, the range cut from it: one request answers every later range.
            /// Best for what is small enough to hold whole, as screens are.
            case whole
            /// The range alone, its 206 held as a part; a later request for the whole asks only for what is
            /// missing. Representations too large to hold whole are always fetched this way.
            case part
        }

        /// The policy that applies to `path`.
        public func policy(forPath path: String) -> RoutePolicy {
            guard !routes.isEmpty else { return policy }
            // Compared as bytes, by index: `hasPrefix` compares characters and `count` counts them, and a copy of
            // each matching route retained its policy's lists, about 900 instructions a request with one route.
            // A path is normalised (percent-encoded past ASCII), and HTTP's prefixes are bytes.
            let best = path.withContiguousUTF8 { path -> Int? in
                var best: Int?
                var bestCount = -1
                for index in routes.indices {
                    let count = routes[index].prefix.utf8.count
                    if count > bestCount,
                        routes[index].prefix.withContiguousUTF8({ ByteSearch.hasPrefix(path, $0) })
                    {
                        best = index
                        bestCount = count
                    }
                }
                return best
            }
            return best.map { routes[$0].policy } ?? policy
        }
    }

    /// How the responses under one path prefix are cached.
    public struct RoutePolicy: Sendable, Equatable {
        /// Freshness given to responses that carry no freshness information; zero means they are not stored.
        public var defaultTTL: Duration = .zero {
            didSet { defaultTTLSeconds = defaultTTL.wholeSeconds }
        }
        /// ``defaultTTL`` and ``staleIfError`` in whole seconds, as every fill reads them: worked out from a
        /// `Duration` (a 128-bit division) on each fill, they cost a miss about 370 instructions.
        public private(set) var defaultTTLSeconds: Int64 = 0
        public private(set) var staleIfErrorSeconds = RoutePolicy.defaultStaleIfError.wholeSeconds
        /// Whether JSON responses must be Beagle components (`_beagleComponent_` at the root).
        public var validateComponents = true
        /// Request headers, besides the platform, whose values select separate entries.
        public var vary: [String] = []
        /// Never cache under this prefix; requests are forwarded and marked `BYPASS`.
        public var bypass = false
        /// On a bypass route: request bodies are streamed to the backend as they arrive, on a connection taken when
        /// the head arrives, instead of being read whole first (`limits.requestBufferBytes`). For large uploads
        /// a backend wants as they come.
        public var stream = false
        /// How long past expiry an entry may be served when the backend is down, times out or answers 5xx,
        /// for responses that do not say (`stale-if-error`); zero turns it off. Never for responses that say
        /// `must-revalidate`, `proxy-revalidate`, `no-cache` or `s-maxage` (RFC 9111 section 4.2.4).
        public var staleIfError: Duration = RoutePolicy.defaultStaleIfError {
            didSet { staleIfErrorSeconds = staleIfError.wholeSeconds }
        }
        private static let defaultStaleIfError: Duration = .seconds(600)

        public init() {}
    }

    /// A path prefix and the policy for it.
    public struct Route: Sendable, Equatable {
        public var prefix: String
        public var policy: RoutePolicy

        public init(prefix: String, policy: RoutePolicy) {
            self.prefix = prefix
            self.policy = policy
        }
    }

    /// Warm-up and action-driven prefetching.
    public struct Prefetch: Sendable, Equatable {
        /// Paths or absolute URLs fetched at start-up.
        public var urls: [String] = []
        /// The platforms each URL is fetched for.
        public var platforms: [String] = ["IOS", "ANDROID", "WEB"]
        /// How many hops of `shouldPrefetch` navigation actions are followed; 0 turns following off.
        public var followActions = 1
        /// How many prefetches run at once.
        public var concurrency = 8
        /// Re-fetch declared URLs shortly before they expire, so they never go cold.
        public var refresh = false
        /// When `/ready` says ready: once the start-up warm-up has finished, or once every declared URL has been
        /// fetched successfully (the failed ones are tried again until they are).
        public var readyWhen = ReadyWhen.finished
        /// Hosts besides the upstream's that absolute action URLs may name (other names of this service).
        public var allowedHosts: [String] = []
        /// The most URLs one call to the prefetch endpoint may list.
        public var maxURLsPerRequest = 256
        /// The largest body the prefetch endpoint reads.
        public var maxRequestBytes = 256 << 10
        /// The largest `maxRequestBytes`: the admin listener buffers no larger body.
        public static let largestRequestBytes = 1 << 20

        public init() {}
    }

    /// `prefetch.readyWhen`: what the start-up warm-up must have done before `/ready` answers 200.
    public enum ReadyWhen: String, Sendable, Equatable, CaseIterable {
        /// Every declared URL has been tried once, whatever came of it.
        case finished
        /// Every declared URL has been fetched successfully once; failed ones are tried again with backoff.
        case succeeded
    }

    /// Limits on what clients of the public listener may send and how long they may take.
    public struct Limits: Sendable, Equatable {
        /// The request line and headers together.
        public var maxHeaderBytes = 16 << 10
        /// How many header fields a request may have.
        public var maxHeaderCount = 100
        /// The request target.
        public var maxURLBytes = 8 << 10
        /// A request body (forwarded requests; queued ones have `queue.maxBodyBytes`).
        public var maxBodyBytes = 10 << 20
        /// A forwarded request's body is read whole before a backend connection is taken for it: this much is kept
        /// in memory, the rest written to a temporary file in ``requestBufferDirectory``.
        public var requestBufferBytes = 64 << 10
        /// Where bodies larger than ``requestBufferBytes`` are written while they arrive; nil is the system's
        /// temporary directory (`TMPDIR`, else `/tmp`).
        public var requestBufferDirectory: String?
        /// From the first byte of a request to its end.
        public var requestTimeout: Duration = .seconds(30)
        /// How long a keep-alive connection may wait for its next request.
        public var idleTimeout: Duration = .seconds(60)
        /// Open client connections; more are answered 503 and closed.
        public var maxConnections = 10_000

        public init() {}
    }

    /// The event loops every connection, upstream exchange and timer runs on.
    public struct EventLoops: Sendable, Equatable {
        /// How many; 0 is one per core the process may use (its cgroup CPU quota or cpuset, when it has one).
        public var count = 0
        /// A loop that has kept its core for this long, without pausing, lets the threads waiting for that core
        /// run before it goes on; zero never does. Linux takes the core from a thread that never pauses only at
        /// its scheduler tick (every 4 ms at the common 250 Hz), so on a machine with more busy threads than cores
        /// (another loop, the clients, a sidecar) every connection of the waiting loop would wait that long. A loop
        /// judges this where it has flushed a client connection's answers, so one busy with no client's requests
        /// (fills for a warm-up or the prefetcher alone, TLS handshakes) does not yield.
        public var yieldAfter: Duration = .microseconds(250)

        public init() {}
    }

    /// Behaviour for older clients.
    public struct Compatibility: Sendable, Equatable {
        /// Beagle 1.x cache protocol: responses carry `beagle-hash` and a plain `Cache-Control: max-age=N`, and
        /// a request whose `beagle-hash` matches gets an empty 304.
        public var beagleHash = false

        public init() {}
    }

    /// Logging.
    public struct Log: Sendable, Equatable {
        public var level = "info"
        /// `text` for people, `json` for log shippers.
        public var format = "text"
        /// One line per request (method, path, status, cache result, bytes, durations).
        public var access = false

        public init() {}
    }
}
