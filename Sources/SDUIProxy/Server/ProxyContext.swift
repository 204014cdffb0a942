import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore

/// Everything a connection handler needs to answer requests, shared by all connections.
///
/// A class, so handing it around (per request, per connection) costs one reference count, not one per field.
public final class ProxyContext: Sendable {
    public let configuration: ProxyConfiguration
    public let cache: ResponseCache
    /// Where invalidations made here go: this cache, and the fleet's log when there is one.
    public let invalidator: CacheInvalidator
    public let fetcher: ComponentFetcher
    public let client: any NetworkClient
    public let requestBuilder: UpstreamRequestBuilder
    /// The durable queue for configured write routes, when there is one.
    public let writeQueue: WriteQueue?
    public let metrics: ProxyMetrics
    public let logger: Logger
    /// Where access-log lines go, when `log.access` is on.
    public let accessLogger: Logger?
    /// The per-route metrics, when `metrics.routes` lists templates.
    let routeMetrics: RouteMetrics?
    /// Makes each request's span, when tracing is on: made once at start and kept across reloads.
    let tracer: RequestTracer?
    /// Whether every request takes notes (``AccessNotes``): for an access log or route counts. Read by every
    /// request, so one flag is read rather than two optionals, one of them a whole `Logger`.
    let notesEveryRequest: Bool
    /// Whether any request may take notes: every one, or those a tracer traces.
    let takesNotes: Bool
    /// Resolves navigation and prefetch URLs against this configuration's upstream and allowed hosts.
    public let prefetchPlanner: PrefetchPlanner
    /// Where each request goes: the cache path, a forward, a queued write or a refusal.
    public let router: RequestRouter
    /// What responses tell clients about the cache: `Cache-Status`, `X-Cache`.
    let cacheReporting: CacheReporting
    /// Where the files of request bodies too large to keep in memory are written and read, off the event loops.
    let threadPool: NIOThreadPool
    /// Where those files go: `limits.requestBufferDirectory`, or the system's temporary directory.
    let requestBufferDirectory: String
    /// What clients see of the fields of answers the cache does not key (forwarded GETs and HEADs), and of those
    /// on a route that keys on no field of its own: made once here, since building them (their `Vary` text) cost
    /// every forwarded request thousands of instructions.
    let forwardedClientFields: ClientFacingFields
    private let plainRouteClientFields: ClientFacingFields

    public init(
        configuration: ProxyConfiguration,
        cache: ResponseCache,
        fetcher: ComponentFetcher,
        client: any NetworkClient,
        writeQueue: WriteQueue? = nil,
        metrics: ProxyMetrics = ProxyMetrics(),
        invalidator: CacheInvalidator? = nil,
        threadPool: NIOThreadPool = .singleton,
        tracer: RequestTracer? = nil,
        logger: Logger
    ) {
        self.threadPool = threadPool
        self.tracer = tracer
        self.requestBufferDirectory =
            configuration.limits.requestBufferDirectory ?? RequestSpoolFile.systemTemporaryDirectory
        precondition(invalidator.map { $0.cache === cache } ?? true, "the invalidator must apply to this cache")
        self.invalidator = invalidator ?? CacheInvalidator(cache: cache)
        self.writeQueue = writeQueue
        self.metrics = metrics
        self.accessLogger = configuration.log.access ? Logger(label: "sdui-proxy.access") : nil
        self.routeMetrics = RouteMetrics(configuration)
        self.notesEveryRequest = configuration.log.access || routeMetrics != nil
        self.takesNotes = notesEveryRequest || tracer != nil
        self.prefetchPlanner = fetcher.prefetchPlanner
        self.configuration = configuration
        self.cache = cache
        self.fetcher = fetcher
        self.client = client
        self.logger = logger
        self.router = RequestRouter(configuration: configuration, queue: writeQueue?.configuration)
        self.cacheReporting = CacheReporting(configuration.cache)
        self.forwardedClientFields = ClientFacingFields(configuration, policy: nil)
        self.plainRouteClientFields = ClientFacingFields(configuration, policy: ProxyConfiguration.RoutePolicy())
        self.requestBuilder = UpstreamRequestBuilder(
            platformHeader: configuration.platform.header,
            configuredHeaders: configuration.headers
        )
    }

    /// What clients see of the fields of answers keyed on `policy`'s route (``ClientFacingFields``).
    func clientFields(for policy: ProxyConfiguration.RoutePolicy) -> ClientFacingFields {
        policy.vary.isEmpty ? plainRouteClientFields : ClientFacingFields(configuration, policy: policy)
    }

    /// The planner for a configuration: its upstream, and the other names of this proxy and its backend.
    static func prefetchPlanner(for configuration: ProxyConfiguration) -> PrefetchPlanner {
        PrefetchPlanner(
            upstream: (try? UpstreamOrigin(parsing: configuration.upstream.url)) ?? .directory(path: "."),
            allowedHosts: configuration.prefetch.allowedHosts
        )
    }

    /// Builds a context for `configuration`: its upstream client and fetcher, over a cache and coalescer
    /// that may be carried over from the context it replaces.
    static func build(
        configuration: ProxyConfiguration,
        cache: ResponseCache,
        coalescer: RequestCoalescer<CacheKey, ComponentFetcher.Outcome, FillLeader>?,
        bufferBudget: ByteBudget? = nil,
        client reusedClient: (any NetworkClient)?,
        writeQueue: WriteQueue?,
        metrics: ProxyMetrics,
        invalidator: CacheInvalidator? = nil,
        eventLoopGroup: any EventLoopGroup,
        threadPool: NIOThreadPool,
        compressionPool: CompressionPool? = nil,
        tracer: RequestTracer? = nil,
        logger: Logger
    ) throws -> ProxyContext {
        let client: any NetworkClient
        if let reusedClient {
            client = reusedClient
        } else {
            switch try UpstreamOrigin(parsing: configuration.upstream.url) {
            case .http(let origin):
                // Connections pooled on each event loop, over TLS for an https:// backend.
                client = try LoopLocalHTTPClient(
                    origin: origin,
                    configuration: configuration.upstream,
                    eventLoopGroup: eventLoopGroup
                )
            case .directory(let path):
                client = try FileNetworkClient(directory: path, threadPool: threadPool)
            }
        }
        // A waiter takes its leader's outcome, and the leader's exchange is bounded by the head's deadline and the
        // body's idle limit; past both and a second more, something is wrong and the waiter fetches alone.
        let maximumWait =
            configuration.upstream.timeout.timeAmount + configuration.upstream.bodyIdleTimeout.timeAmount + .seconds(1)
        let coalescer = coalescer ?? RequestCoalescer(maximumWait: maximumWait)
        coalescer.maximumWait = maximumWait
        // Invalidations are remembered for the fills in flight they reach for twice as long as a waiter waits: a
        // fill that outlasts that (its body trickling in past many idle limits) is not stored when an invalidation
        // came while it ran, since the record of what that one reached is gone.
        cache.fillRetention = maximumWait * 2
        let fetcher = ComponentFetcher(
            cache: cache,
            client: client,
            maxResponseBytes: configuration.upstream.maxResponseBytes,
            bufferBudget: bufferBudget?.limit == configuration.upstream.maxBufferedBytes
                ? bufferBudget : ByteBudget(limit: configuration.upstream.maxBufferedBytes),
            platformHeader: configuration.platform.header,
            tagHeader: configuration.cache.tagHeader,
            exposesTags: configuration.cache.exposeTags,
            storageRules: configuration.cache.storageRules,
            computesContentHash: configuration.compat.beagleHash,
            metrics: metrics,
            coalescer: coalescer,
            prefetchPlanner: prefetchPlanner(for: configuration),
            compression: configuration.compression,
            compressionPool: compressionPool,
            logger: logger
        )
        return ProxyContext(
            configuration: configuration,
            cache: cache,
            fetcher: fetcher,
            client: client,
            writeQueue: writeQueue,
            metrics: metrics,
            invalidator: invalidator,
            threadPool: threadPool,
            tracer: tracer,
            logger: logger
        )
    }

    /// The fetch that fills `key` for a client's request, for the connection handlers and the prefetcher alike:
    /// the upstream request built for a cache fill, and the rules that follow from the client's headers.
    ///
    /// - A request with `Authorization` fetches alone: its answer may depend on who asked.
    /// - The client's `Host` goes upstream only when the route's key holds it (``UpstreamRequestBuilder``).
    /// - `clientFields` is what the router noted of `clientHeaders` as it walked them; nil to walk them here.
    /// - `acceptEncoding`: the client's, as the router found it (nil: looked for in `clientHeaders`).
    /// - `preparesEveryCoding`: the fill is for clients yet to come (a prefetch), so its body is compressed in every
    ///   configured coding (``ComponentFetcher/Request/preparesEveryCoding``).
    /// - `lastUpstreamFields`: the client connection's last upstream fields, handed out again when built from the same.
    func cacheFill(
        key: CacheKey,
        target: RequestTarget,
        platform: String,
        clientHeaders: HTTPHeaders,
        clientFields: RequestFieldPresence? = nil,
        policy: ProxyConfiguration.RoutePolicy,
        staleEntry: CachedResponse?,
        clientAddress: String?,
        clientIsTrustedProxy: Bool,
        received: UpstreamRequestBuilder.Received = .http1_1,
        lastUpstreamFields: RepeatedUpstreamFields? = nil,
        followActions: Int,
        requester: UpstreamIdentity? = nil,
        interim: InterimRelay? = nil,
        acceptEncoding: String? = nil,
        preparesEveryCoding: Bool = false
    ) -> ComponentFetcher.Request {
        var fields = requestBuilder.fields(
            from: clientHeaders,
            noted: clientFields,
            platform: platform,
            clientAddress: clientAddress,
            purpose: .cacheFill,
            clientIsTrustedProxy: clientIsTrustedProxy,
            hostIsKeyed: policy.vary.contains { $0.lowercased() == "host" },
            received: received,
            reusing: lastUpstreamFields
        )
        requester?.stamp(&fields, mayHaveID: requestBuilder.mayCarryRequestID(noted: clientFields))
        return ComponentFetcher.Request(
            key: key,
            // Made in place: an initializer takes its arguments owned, and from a variable that was a copy,
            // retaining the request's strings and arrays.
            upstream: UpstreamRequest(
                method: .GET,
                target: target.description,
                fields: consume fields,
                interim: interim
            ),
            policy: policy,
            clientHeaders: clientHeaders,
            clientFields: clientFields,
            mayCoalesce: true,
            staleEntry: staleEntry,
            followActions: followActions,
            trace: requester?.trace,
            acceptEncoding: acceptEncoding,
            preparesEveryCoding: preparesEveryCoding
        )
    }
}
