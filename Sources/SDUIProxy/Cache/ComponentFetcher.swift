import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// The miss path (the seed's ViewClient `fetch`): one coalesced upstream request per key, the answer decoded
/// and validated, its freshness computed, and the entry stored.
public final class ComponentFetcher: Sendable {
    /// What a fetch produced.
    public enum Outcome: Sendable {
        /// The response was stored; this is the entry.
        case stored(CachedResponse)
        /// The response may not be stored; `reason` says why (for logs).
        case notStored(UpstreamResponse, reason: String)
    }

    /// One fetch to make.
    public struct Request: Sendable {
        public var key: CacheKey
        public var upstream: UpstreamRequest
        public var policy: ProxyConfiguration.RoutePolicy
        /// The client's headers, for the rules that depend on them (`Authorization`).
        public var clientHeaders: HTTPHeaders
        /// Whether this request may share an exchange with identical ones.
        public var mayCoalesce: Bool

        public init(
            key: CacheKey,
            upstream: UpstreamRequest,
            policy: ProxyConfiguration.RoutePolicy,
            clientHeaders: HTTPHeaders,
            mayCoalesce: Bool
        ) {
            self.key = key
            self.upstream = upstream
            self.policy = policy
            self.clientHeaders = clientHeaders
            self.mayCoalesce = mayCoalesce
        }
    }

    public let cache: ResponseCache
    public let client: any NetworkClient
    public let coalescer: RequestCoalescer<CacheKey, Outcome>
    private let decoder = ComponentDecoder()
    private let maxResponseBytes: Int
    /// Headers the cache key already accounts for; a `Vary` on anything else cannot be served from this key.
    private let keyedHeaders: Set<String>
    private let logger: Logger

    public init(
        cache: ResponseCache,
        client: any NetworkClient,
        maxResponseBytes: Int,
        keyedHeaders: Set<String>,
        coalescingWait: TimeAmount,
        logger: Logger
    ) {
        self.cache = cache
        self.client = client
        self.maxResponseBytes = maxResponseBytes
        self.keyedHeaders = keyedHeaders
        self.coalescer = RequestCoalescer(maximumWait: coalescingWait)
        self.logger = logger
    }

    /// Fetches `request`, joining an identical fetch already in flight when allowed.
    public func fetch(_ request: Request, on eventLoop: any EventLoop) -> EventLoopFuture<Outcome> {
        guard request.mayCoalesce else { return exchange(request, on: eventLoop) }
        let (result, isLeader) = coalescer.run(key: request.key, on: eventLoop) {
            exchange(request, on: eventLoop)
        }
        if isLeader { return result }
        // A waiter receives the leader's answer only when every client could have received it: a stored
        // entry, or an error status that is not private. Anything else it fetches for itself.
        return result.hop(to: eventLoop).flatMap { outcome in
            switch outcome {
            case .stored:
                return eventLoop.makeSucceededFuture(outcome)
            case .notStored(let response, _) where response.status.code >= 400 && Self.isShareable(response):
                return eventLoop.makeSucceededFuture(outcome)
            case .notStored:
                return self.exchange(request, on: eventLoop)
            }
        }.flatMapError { error in
            if case RequestCoalescer<CacheKey, Outcome>.Failure.waitedTooLong = error {
                self.logger.debug("coalesced wait timed out, fetching alone", metadata: ["key": "\(request.key)"])
                return self.exchange(request, on: eventLoop)
            }
            return eventLoop.makeFailedFuture(error)
        }
    }

    private static func isShareable(_ response: UpstreamResponse) -> Bool {
        let cacheControl = CacheControl(headers: response.headers)
        return !cacheControl.isPrivate && !response.headers.contains(name: "set-cookie")
    }

    /// One upstream exchange: request, validate, decide, store.
    private func exchange(_ request: Request, on eventLoop: any EventLoop) -> EventLoopFuture<Outcome> {
        let requestTime = HTTPDate.now()
        return client.fetch(request.upstream, maxBodyBytes: maxResponseBytes, on: eventLoop).flatMapThrowing {
            response in
            try self.process(response, for: request, requestTime: requestTime)
        }
    }

    private func process(_ response: UpstreamResponse, for request: Request, requestTime: Int64) throws(ProxyError)
        -> Outcome
    {
        let isSuccess = (200..<300).contains(response.status.code)
        if isSuccess, request.policy.validateComponents,
            ComponentDecoder.isJSON(contentType: response.headers.first(name: "content-type"))
        {
            do {
                _ = try decoder.decodeComponent(response.body)
            } catch {
                logger.warning(
                    "invalid component from the backend, not cached",
                    metadata: ["target": "\(request.upstream.target)", "reason": "\(error.reason)"]
                )
                throw ProxyError(.decoding, error.reason)
            }
        }

        let decision = FreshnessPolicy.decide(
            requestHeaders: request.clientHeaders,
            status: response.status,
            responseHeaders: response.headers,
            defaultTTL: request.policy.defaultTTL.wholeSeconds
        )
        guard case .store(let lifetime) = decision else {
            guard case .doNotStore(let reason) = decision else { fatalError("unreachable") }
            return .notStored(response, reason: reason)
        }
        if let unkeyed = unkeyedVaryHeader(in: response.headers) {
            return .notStored(response, reason: "varies on \(unkeyed)")
        }

        let responseTime = HTTPDate.now()
        let entry = makeEntry(
            from: response,
            lifetime: lifetime,
            initialAge: FreshnessPolicy.initialAge(
                headers: response.headers,
                requestTime: requestTime,
                responseTime: responseTime
            )
        )
        guard cache.store(entry, for: request.key) else {
            return .notStored(response, reason: "larger than a cache shard's budget")
        }
        logger.debug(
            "stored",
            metadata: ["key": "\(request.key)", "bytes": "\(entry.byteCost)", "ttl": "\(lifetime)"]
        )
        return .stored(entry)
    }

    private func unkeyedVaryHeader(in headers: HTTPHeaders) -> String? {
        for line in headers[canonicalForm: "vary"] {
            let name = line.lowercased()
            if name != "accept-encoding", !keyedHeaders.contains(name) { return name }
        }
        return nil
    }

    private func makeEntry(from response: UpstreamResponse, lifetime: Int64, initialAge: Int64) -> CachedResponse {
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(response.headers)
        headers.remove(name: "content-length")
        headers.remove(name: "age")
        let etag: String
        if let backendTag = headers.first(name: "etag") {
            etag = backendTag
        } else {
            etag = ContentHash.entityTag(for: response.body)
            headers.add(name: "ETag", value: etag)
        }
        // Accumulated bodies can carry spare capacity; an exact copy keeps the byte budget honest.
        var body = response.body
        if body.capacity > body.readableBytes + body.readableBytes / 4 + 1024 {
            var exact = ByteBufferAllocator().buffer(capacity: body.readableBytes)
            exact.writeImmutableBuffer(body)
            body = exact
        }
        return CachedResponse(
            status: response.status,
            headers: headers,
            body: body,
            etag: etag,
            storedAt: .now(),
            initialAge: initialAge,
            freshnessLifetime: lifetime
        )
    }
}
