import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization
import Tracing

/// The miss path (the seed's ViewClient `fetch`): one coalesced upstream request per key, the answer decoded
/// and validated, its freshness computed, and the entry stored. A stale entry is revalidated with the
/// backend's validators, and served instead of an error when its `stale-if-error` window allows.
///
/// What to store, what a stale entry does and what a coalesced waiter takes is decided by ``CacheFillPolicy``;
/// the fetcher makes the exchanges and does what it decides.
public final class ComponentFetcher: Sendable {
    /// What a fetch produced.
    public enum Outcome: Sendable {
        /// A new response was stored; this is the entry.
        case stored(CachedResponse)
        /// The backend confirmed the stale entry (304); this is the refreshed entry.
        case revalidated(CachedResponse)
        /// The backend failed and the stale entry may stand in for it; `backendStatus` is the server error it
        /// answered with, nil when it gave no answer.
        case servedStale(CachedResponse, because: String, backendStatus: UInt?)
        /// The response may not be stored; `reason` says why (for logs).
        case notStored(UpstreamResponse, reason: String)
        /// The response would have been stored, but an invalidation reached the fill while it was in flight: it
        /// answers the requests that were waiting for it and is not stored. `reason` names the invalidation.
        case invalidated(CachedResponse, reason: String)
    }

    /// One fetch to make. A reference: the miss path hands it to the coalescer, the exchange and the callbacks
    /// after it, and each copy of a value this size retained all of its members.
    ///
    /// While its upstream exchange is in flight it also holds what the exchange's end needs (``Exchange``), so
    /// that the client's callback captures the request alone. A closure that captures a single reference uses
    /// it as its context; one that captures more is given a context object of its own, an allocation on every
    /// miss. `@unchecked Sendable` for that state: it is written before the exchange is handed to the client,
    /// and read and cleared when the exchange ends, on the fetch's loop; nothing touches it in between. A
    /// request is fetched once at a time (checked).
    public final class Request: @unchecked Sendable {
        public let key: CacheKey
        public let upstream: UpstreamRequest
        public let policy: ProxyConfiguration.RoutePolicy
        /// The client's headers, for the rules that depend on them (`Authorization`, `Vary`).
        public let clientHeaders: HTTPHeaders
        /// Which of the fields the cache path asks about `clientHeaders` carries.
        public let clientFields: RequestFieldPresence
        /// The client's `Accept-Encoding`, which decides the coding its fill compresses the body in.
        public let acceptEncoding: String?
        /// Whether this request may share an exchange with identical ones: never one with `Authorization`.
        public let mayCoalesce: Bool
        /// The stale entry this fetch replaces, if any: it is revalidated rather than fetched blind.
        public let staleEntry: CachedResponse?
        /// How many more hops of `shouldPrefetch` navigation to follow from the component this fetch stores.
        public let followActions: Int
        /// The span context of the request that asked, when it is traced: the requests that wait for this fetch's
        /// exchange link to it.
        public let trace: InstrumentationContext?
        /// Whether the fetch is made for clients yet to come (a prefetch), whose codings nobody has asked for: its
        /// body is compressed in every configured coding when stored, not in the one its client takes.
        public let preparesEveryCoding: Bool
        /// The upstream exchange in flight for this request, if any.
        fileprivate var exchange: Exchange?

        public init(
            key: CacheKey,
            upstream: UpstreamRequest,
            policy: ProxyConfiguration.RoutePolicy,
            clientHeaders: HTTPHeaders,
            clientFields: RequestFieldPresence? = nil,
            mayCoalesce: Bool,
            staleEntry: CachedResponse? = nil,
            followActions: Int = 0,
            trace: InstrumentationContext? = nil,
            acceptEncoding: String? = nil,
            preparesEveryCoding: Bool = false
        ) {
            self.followActions = followActions
            self.preparesEveryCoding = preparesEveryCoding
            self.trace = trace
            self.key = key
            self.upstream = upstream
            self.policy = policy
            self.clientHeaders = clientHeaders
            let clientFields = clientFields ?? RequestFieldPresence(clientHeaders)
            // Fields noted elsewhere stand for the headers: they may say more than the headers (a stricter rule),
            // never less, or a request with credentials could share an exchange and have its answer stored.
            assert(clientFields.cover(clientHeaders), "the noted fields miss some the client's headers carry")
            self.clientFields = clientFields
            // As the router found it when the caller has it; else looked for only when the client sent one.
            self.acceptEncoding =
                acceptEncoding
                ?? (clientFields.contains(.acceptEncoding) ? clientHeaders.first(name: "accept-encoding") : nil)
            // Whatever the caller says: the answer to one with credentials may depend on who asked.
            self.mayCoalesce = mayCoalesce && !clientFields.contains(.authorization)
            self.staleEntry = staleEntry
        }
    }

    /// An upstream exchange in flight: who made it, where and when, and who hears its outcome. Internal for the
    /// fetcher's extensions, which store answers that came another way as an exchange's would be.
    struct Exchange {
        let fetcher: ComponentFetcher
        let eventLoop: any EventLoop
        let completion: Completion
        /// The coalesced run the exchange leads, whose waiters get its outcome first; nil when it leads none.
        let coalescedRun: RequestCoalescer<CacheKey, Outcome, FillLeader>.Run?
        /// The fill's place among the fills in flight, which decides whether an invalidation reached it.
        let ticket: InvalidationHistory.Ticket
        /// When the request went out, in the two clocks its uses need: the response's age (RFC 9111 section
        /// 4.2.3) and the exchange's duration.
        let requestTime: Int64
        let started: NIODeadline
    }

    public let cache: ResponseCache
    public let client: any NetworkClient
    public let coalescer: RequestCoalescer<CacheKey, Outcome, FillLeader>
    private let decoder = ComponentDecoder()
    /// Plans the prefetches of the components this fetcher stores: the planner of the configuration the fetcher
    /// was made for, held here so that a miss reads no shared state to find it.
    let prefetchPlanner: PrefetchPlanner
    let maxResponseBytes: Int
    /// `upstream.maxBufferedBytes`: what all fills' bodies may hold at once; nil for no limit but each body's.
    let bufferBudget: ByteBudget?
    /// Keys whose last fill was too large to hold: their next misses are streamed without a fill.
    let oversizedMarks = OversizedResponseMarks()
    /// The streams of responses too large to hold that identical misses share.
    let sharedStreams = SharedResponseStreams()
    /// The platform header (lower case), which every cache key accounts for: a `Vary` on it needs no variant
    /// of its own, nor does one on a header the request's route keys on (its policy's `vary`).
    let platformHeader: String
    let tagHeader: String
    /// `cache.exposeTags`: whether clients see the tag header of stored entries.
    let exposesTags: Bool
    /// The client-facing fields of entries on routes that key on no header of their own (nearly all): made once
    /// here, not on every miss.
    let plainClientFields: ClientFacingFields
    /// The operator's cache-wide rules for what is stored and for how long.
    let storageRules: StorageRules
    /// Whether stored entries compute their content hash up front: only Beagle 1.x clients ask for it.
    let computesContentHash: Bool
    let metrics: ProxyMetrics
    /// Keeps stored responses compressed as `compression` says; nil keeps them in identity only.
    let compressor: StoreTimeCompressor?
    /// The threads that compress large bodies, which the fetcher that replaces this one at a reload takes over.
    var compressionPool: CompressionPool? { compressor?.pool }
    let logger: Logger
    /// The time entries are stored, aged and served by; the system's but in tests that move time themselves.
    let clock: CacheClock
    /// Where failures of the backend are logged, each key and kind at most once an interval; the connection
    /// handlers log theirs here too.
    public let failureLog: FailureLog
    /// Whether debug lines are written, read once: asking the logger copies its handler, whose reference count
    /// every loop writes, and the miss path would ask on every entry stored.
    private let logsDebug: Bool
    /// Told about every component stored with hops left to follow that mentions `shouldPrefetch`, with the
    /// plan made in the pass that validated it.
    ///
    /// A weak object reference, not a closure: a closure kept in a `Mutex` was re-wrapped in a reabstraction
    /// thunk on every read in optimised builds, until calling it overflowed the stack.
    private let componentObserver = Mutex(WeakObserver())

    private struct WeakObserver {
        weak var observer: (any StoredComponentObserver)?
    }

    /// Sets who hears of stored components (the prefetcher, for the screens a user opens next).
    public func observeStoredComponents(_ observer: (any StoredComponentObserver)?) {
        componentObserver.withLock { $0.observer = observer }
    }

    /// Who hears of stored components, to hand over to the fetcher that replaces this one.
    var storedComponentObserver: (any StoredComponentObserver)? { componentObserver.withLock { $0.observer } }

    public init(
        cache: ResponseCache,
        client: any NetworkClient,
        maxResponseBytes: Int,
        bufferBudget: ByteBudget? = nil,
        platformHeader: String,
        tagHeader: String,
        exposesTags: Bool = false,
        storageRules: StorageRules,
        computesContentHash: Bool = true,
        metrics: ProxyMetrics,
        coalescer: RequestCoalescer<CacheKey, Outcome, FillLeader>,
        prefetchPlanner: PrefetchPlanner,
        compression: CompressionConfiguration? = nil,
        compressionPool: CompressionPool? = nil,
        clock: CacheClock = .system,
        logger: Logger
    ) {
        self.clock = clock
        self.compressor = compression.map {
            StoreTimeCompressor(configuration: $0, pool: compressionPool, metrics: metrics, logger: logger)
        }
        self.prefetchPlanner = prefetchPlanner
        self.metrics = metrics
        self.cache = cache
        self.client = client
        self.maxResponseBytes = maxResponseBytes
        self.bufferBudget = bufferBudget
        self.platformHeader = platformHeader.lowercased()
        self.tagHeader = tagHeader.lowercased()
        self.exposesTags = exposesTags
        self.plainClientFields = ClientFacingFields(
            keyFields: [platformHeader.lowercased()],
            hiddenField: exposesTags ? nil : tagHeader
        )
        self.storageRules = storageRules
        self.computesContentHash = computesContentHash
        self.coalescer = coalescer
        self.logger = logger
        self.failureLog = FailureLog(logger: logger)
        self.logsDebug = logger.logLevel <= .debug
    }

    /// What a fetch hands its caller, on the event loop it was made on: the outcome, and the request whose exchange
    /// it came from when that was another's (a coalesced wait); nil when it was the fetch's own.
    public typealias Completion = @Sendable (_ result: Result<Outcome, any Error>, _ leader: FillLeader?) -> Void

    /// Fetches `request`, joining an identical fetch already in flight when allowed.
    public func fetch(_ request: Request, on eventLoop: any EventLoop) -> EventLoopFuture<Outcome> {
        let promise = eventLoop.makePromise(of: Outcome.self)
        fetch(request, on: eventLoop) { result, _ in promise.completeWith(result) }
        return promise.futureResult
    }

    /// ``fetch(_:on:)`` with the outcome handed to `completion` on `eventLoop`: the cache miss's form, which
    /// makes no future when the fetch leads or does not coalesce.
    public func fetch(_ request: Request, on eventLoop: any EventLoop, completion: @escaping Completion) {
        guard request.mayCoalesce else {
            return exchange(request, on: eventLoop, coalescedRun: nil, completion: completion)
        }
        // A run that an invalidation may have reached since it started takes no more requests: they asked after
        // the purge, and what the run brings may be what it removed.
        let cache = self.cache
        let role = coalescer.join(
            key: request.key,
            stamp: cache.lastInvalidationSequence,
            leader: request.leader,
            on: eventLoop
        ) { stamp in
            cache.mayJoinFill(startedAfter: stamp, target: request.key.target)
        }
        let leaderResult: EventLoopFuture<Outcome>
        let leader: FillLeader
        switch role {
        case .lead(let run):
            return exchange(request, on: eventLoop, coalescedRun: run, completion: completion)
        case .wait(let result, let runLeader):
            (leaderResult, leader) = (result, runLeader)
        }
        metrics.coalescedWait()
        leaderResult.whenComplete { result in
            switch result {
            case .success(let outcome):
                switch request.fillPolicy(self.storageRules).waiterStep(
                    after: outcome.asLeaderOutcome,
                    at: self.clock.now
                ) {
                case .standIn(let reason):
                    let standIn = self.standIn(for: request, because: reason, backendStatus: outcome.failedStatus)
                    completion(.success(standIn), leader)
                case .take:
                    completion(.success(outcome), leader)
                case .fetchAlone:
                    self.exchange(request, on: eventLoop, coalescedRun: nil, completion: completion)
                }
            case .failure(RequestCoalescer<CacheKey, Outcome, FillLeader>.Failure.waitedTooLong):
                self.logger.debug("coalesced wait timed out, fetching alone", metadata: request.logMetadata())
                self.exchange(request, on: eventLoop, coalescedRun: nil, completion: completion)
            case .failure(let error):
                completion(self.standInOrFail(for: request, with: error), leader)
            }
        }
    }

    /// The request's stale entry standing in for a failed backend, as its fill policy allowed: logged, at most
    /// once an interval per target.
    private func standIn(for request: Request, because reason: String, backendStatus: UInt?) -> Outcome {
        guard let stale = request.staleEntry else { preconditionFailure("only a stale entry stands in") }
        failureLog.log(
            level: .info,
            "backend failed, serving stale",
            key: request.key.target,
            kind: "stale",
            metadata: request.logMetadata(["error": "\(reason)"])
        )
        return .servedStale(stale, because: reason, backendStatus: backendStatus)
    }

    /// The stale entry standing in for `error` when the fill policy allows, else the error.
    private func standInOrFail(for request: Request, with error: any Error) -> Result<Outcome, any Error> {
        let failure = CacheFillPolicy.Failure.error("\(error)")
        guard let reason = request.fillPolicy(storageRules).staleStandIn(after: failure, at: clock.now) else {
            return .failure(error)
        }
        return .success(standIn(for: request, because: reason, backendStatus: nil))
    }

    /// Sends the body of `entry` to be compressed in `coding`, which a request's client would rather have and the
    /// entry does not keep yet (``StoreTimeCompressor/compressOnHit(_:in:for:in:whenDone:)``).
    func compressOnHit(_ entry: CachedResponse, in coding: ContentCoding, for key: CacheKey) {
        compressor?.compressOnHit(entry, in: coding, for: key, in: cache)
    }

    /// Refreshes a stale entry without anyone waiting (stale-while-revalidate); joins a refresh in flight.
    public func refreshInBackground(_ request: Request, on eventLoop: any EventLoop) {
        let failureLog = self.failureLog
        fetch(request, on: eventLoop).whenFailure { error in
            failureLog.log(
                level: .info,
                "background refresh failed",
                key: request.key.target,
                kind: (error as? ProxyError)?.kind.description ?? "error",
                metadata: request.logMetadata(["error": "\(error)"])
            )
        }
    }

    /// One upstream exchange: request (conditional when revalidating), validate, decide, store.
    private func exchange(
        _ request: Request,
        on eventLoop: any EventLoop,
        coalescedRun: RequestCoalescer<CacheKey, Outcome, FillLeader>.Run?,
        completion: @escaping Completion
    ) {
        precondition(request.exchange == nil, "a fetch request is fetched once at a time")
        request.exchange = Exchange(
            fetcher: self,
            eventLoop: eventLoop,
            completion: completion,
            coalescedRun: coalescedRun,
            ticket: cache.beginFill(target: request.key.target),
            requestTime: clock.calendarSeconds,
            started: .now()
        )
        guard let stale = request.staleEntry else {
            // Sent as the request holds it: a copy to change would retain each of its strings and arrays.
            return send(request.upstream, for: request, on: eventLoop)
        }
        var upstream = request.upstream
        if let etag = stale.upstreamETag { upstream.fields.replaceOrAdd(name: "If-None-Match", value: etag) }
        if let lastModified = stale.lastModified {
            upstream.fields.replaceOrAdd(name: "If-Modified-Since", value: lastModified)
        }
        send(upstream, for: request, on: eventLoop)
    }

    /// Sends `upstream` for `request`, whose exchange ends in ``exchangeEnded(_:of:)``.
    private func send(_ upstream: UpstreamRequest, for request: Request, on eventLoop: any EventLoop) {
        // `ComponentFetcher`, not `Self`: naming `Self` captures the dynamic type too, and the closure then needs
        // a context of its own.
        guard let bufferBudget else {
            return client.fetch(upstream, maxBodyBytes: maxResponseBytes, on: eventLoop) { result in
                ComponentFetcher.exchangeEnded(result, of: request)
            }
        }
        client.fetch(upstream, maxBodyBytes: maxResponseBytes, budget: bufferBudget, on: eventLoop) { result in
            ComponentFetcher.exchangeEnded(result, of: request)
        }
    }

    /// Ends the exchange `request` is in, on the fetch's event loop: its outcome goes to the coalesced run's
    /// waiters, if it leads one, then to the fetch's caller.
    private static func exchangeEnded(_ result: Result<UpstreamResponse, any Error>, of request: Request) {
        guard let eventLoop = request.exchange?.eventLoop else { preconditionFailure("an exchange ended twice") }
        // Clients complete on the fetch's loop, and callers rely on it; one that did not is brought back to it.
        guard eventLoop.inEventLoop else {
            return eventLoop.execute { exchangeEnded(result, of: request) }
        }
        // Moved out, not copied: a copy retains the fetcher, which every loop's misses retain.
        let exchange = request.exchange.take()!
        exchange.fetcher.finish(exchange, with: result, of: request)
    }

    /// A stored component's prefetch plan, and who is told of it once the fetch's caller has its answer.
    typealias StoredPlan = (plan: PrefetchPlanner.Plan, observer: any StoredComponentObserver)

    /// Decides what the ended exchange's result means, and hands the outcome on.
    private func finish(
        _ exchange: borrowing Exchange,
        with result: Result<UpstreamResponse, any Error>,
        of request: Request
    ) {
        var storedPlan: StoredPlan?
        let outcome = outcome(of: result, for: request, exchange, storedPlan: &storedPlan)
        cache.endFill(exchange.ticket)
        if let run = exchange.coalescedRun { coalescer.finish(run, with: outcome) }
        exchange.completion(outcome, nil)
        // The observer hears last: the prefetches it starts go to the same backend, and the client whose miss
        // stored the component is answered before they are sent.
        if let storedPlan {
            storedPlan.observer.componentStored(storedPlan.plan, by: request, on: exchange.eventLoop)
        }
    }

    /// What an upstream exchange's result means for the fetch; `storedPlan` is set when a component with
    /// navigation to prefetch was stored.
    private func outcome(
        of result: Result<UpstreamResponse, any Error>,
        for request: Request,
        _ exchange: borrowing Exchange,
        storedPlan: inout StoredPlan?
    ) -> Result<Outcome, any Error> {
        switch result {
        case .success(let response):
            metrics.upstreamCompleted(after: NIODeadline.now() - exchange.started)
            do {
                return .success(try process(response, for: request, exchange, &storedPlan))
            } catch {
                return standInOrFail(for: request, with: error)
            }
        case .failure(let error):
            metrics.upstreamFailed(kind: (error as? ProxyError)?.kind ?? .network)
            return standInOrFail(for: request, with: error)
        }
    }

    /// Decides what an exchange's answer becomes: decoded, validated, stored or not, and why.
    func process(
        _ response: UpstreamResponse,
        for request: Request,
        _ exchange: borrowing Exchange,
        _ storedPlan: inout StoredPlan?
    ) throws(ProxyError) -> Outcome {
        let requestTime = exchange.requestTime
        let policy = request.fillPolicy(storageRules)
        switch policy.firstStep(for: response.status, at: clock.now) {
        case .revalidate:
            guard let stale = request.staleEntry else { preconditionFailure("only a stale entry is revalidated") }
            return revalidate(stale, with: response.headers, for: request, policy, exchange)
        case .standIn(let reason):
            return standIn(for: request, because: reason, backendStatus: response.status.code)
        case .decide:
            break
        }
        var response = response
        var decodedBytes = 0
        defer { bufferBudget?.release(decodedBytes) }
        if response.fields.contains("content-encoding") {
            switch try decodingContentCoding(of: response, for: request) {
            case .identity(let decoded, let reserved):
                (response, decodedBytes) = (decoded, reserved)
            case .unknownCoding(let coding):
                return .notStored(response, reason: "in a content coding the proxy does not decode (\(coding))")
            }
        }

        var plan: StoredPlan?
        if CacheFillPolicy.validatesBody(
            status: response.status,
            fields: response.fields,
            routeValidatesComponents: request.policy.validateComponents
        ) {
            do {
                // A component that never says "shouldPrefetch" has no navigation to follow.
                if request.followActions > 0, let observer = storedComponentObserver,
                    ByteSearch.contains(Self.shouldPrefetchKey, in: response.body)
                {
                    let planned = try ThreadScanStorage.withStorage { storage throws(ComponentDecoder.Failure) in
                        try decoder.validateComponent(response.body, planningWith: prefetchPlanner, reusing: &storage)
                    }
                    plan = (planned, observer)
                } else {
                    try decoder.validateComponent(response.body)
                }
            } catch {
                failureLog.log(
                    level: .warning,
                    "invalid component from the backend, not cached",
                    key: request.upstream.target,
                    kind: "decoding",
                    metadata: request.logMetadata(["target": "\(request.upstream.target)", "reason": "\(error.reason)"])
                )
                throw ProxyError(.decoding, error.reason)
            }
        }

        // Read once: the decision to store and the stored entry follow the same directives.
        let directives = policy.rules.directives(of: response.fields)
        let lifetime: Int64
        switch policy.storeDecision(status: response.status, fields: response.fields, directives: directives) {
        case .store(let storedLifetime):
            lifetime = storedLifetime
        case .doNotStore(let reason, let dropsStaleEntry):
            if dropsStaleEntry { dropStaleEntry(of: request) }
            return .notStored(response, reason: reason)
        }

        let compression = compressor?.plan(for: response.fields, bodyLength: response.body.readableBytes)
        var metadata = metadata(for: response.fields, request: request, lifetime: lifetime, requestTime: requestTime)
        metadata.variesByEncoding = compression?.variesByEncoding ?? false
        // The codings this fill makes; the others wait until a client asks for them. Through the optional: binding
        // the compressor copies it, retaining each of its references, on every miss.
        var demanded: ContentNegotiation.Codings = []
        if compression?.compresses == true, let configured = compressor?.configuredCodings {
            demanded = compressor?.demandedCodings(by: request) ?? []
            // Made now, kept or not, they are tried: only the rest waits.
            metadata.pendingCodings = compression == .now ? configured.subtracting(demanded) : configured
        }
        let entry = CachedResponse(
            status: response.status,
            fields: response.fields,
            body: response.body,
            // Moved, not copied: an initializer takes its arguments owned, and a copy retained each of the
            // metadata's strings and arrays.
            metadata: consume metadata,
            directives: directives,
            endToEndOnly: true,
            encodedBodies: compression == .now ? compressor?.encode(response.body, in: demanded) ?? [] : []
        )
        let filed = store(entry, for: request, exchange)
        // Filed under other spellings of its language only when stored fresh, as it came.
        if case .stored(let stored) = filed, stored === entry {
            fileUnderLanguages(stored, for: request, ticket: exchange.ticket)
        }
        switch filed {
        case .stored(let stored), .storedStale(let stored):
            if compression == .later, stored === entry, !demanded.isEmpty {
                compressor?.compressLater(stored, in: demanded, for: request.key, in: cache)
            }

            if logsDebug {
                logger.debug(
                    "stored",
                    metadata: request.logMetadata(["bytes": "\(stored.byteCost)", "ttl": "\(lifetime)"])
                )
            }
            storedPlan = plan
            return .stored(stored)
        case .voided(let reason):
            return .invalidated(entry, reason: reason)
        case .rejected:
            return .notStored(response, reason: "larger than a cache shard's budget, or an error over stored variants")
        }
    }

    /// Stores the answer of the fill `exchange` made, unless an invalidation reached the fill while it was in
    /// flight (``ResponseCache/storeFill(_:for:ticket:)``): such a fill is counted and logged.
    func store(
        _ entry: CachedResponse,
        for request: Request,
        _ exchange: borrowing Exchange
    ) -> ResponseCache.FillStore {
        let stored = cache.storeFill(entry, for: request.key, ticket: exchange.ticket)
        let invalidation: (discarded: Bool, reason: String)
        switch stored {
        case .stored, .rejected: return stored
        case .storedStale: invalidation = (false, "a soft invalidation")
        case .voided(let reason): invalidation = (true, reason)
        }
        metrics.fillInvalidated(discarded: invalidation.discarded)
        logger.info(
            invalidation.discarded
                ? "fill invalidated in flight, not stored" : "fill invalidated in flight, stored stale",
            metadata: request.logMetadata(["reason": "\(invalidation.reason)"])
        )
        return stored
    }

    private static let shouldPrefetchKey = Array(#""shouldPrefetch""#.utf8)
}
