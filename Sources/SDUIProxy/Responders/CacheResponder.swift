import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Answers GET and HEAD through the cache: a fresh entry from memory at once, a stale one while it is refreshed
/// in the background when its `stale-while-revalidate` allows, and otherwise what the ``ComponentFetcher``
/// brings back from the backend (stored, revalidated, a stale stand-in, or passed on unstored).
///
/// It writes to a ``ResponseSink`` and knows nothing of the connection: the hit path reads the entry and hands it
/// over, no JSON work and no copy. Work the answer makes possible (a background refresh) starts after it.
struct CacheResponder {
    /// `compat.beagleHash`: Beagle 1.x's `beagle-hash` validation instead of HTTP's.
    let beagleHash: Bool
    /// `prefetch.followActions`: how many hops of navigation a stored component's prefetches follow.
    let followActions: Int
    /// `cache.honorClientNoCache`: a client's `no-cache` or `max-age=0` revalidates a fresh entry.
    let honorsClientNoCache: Bool

    init(_ configuration: ProxyConfiguration) {
        beagleHash = configuration.compat.beagleHash
        followActions = configuration.prefetch.followActions
        honorsClientNoCache = configuration.cache.honorClientNoCache
    }

    /// The answer to `only-if-cached` when nothing stored may serve it (RFC 9111 section 5.2.1.7).
    private static let notCached = ProxyError(.notCached, "only-if-cached, and no stored response may serve it")

    /// Answers `request` on `sink`. `proxy` is the context in force for the request; the caller holds it.
    func respond(to request: CacheRequest, proxy: ProxyContext, sink: any ResponseSink) {
        var staleEntry: CachedResponse?
        let reason: CacheStatus.Forward
        if CacheFillPolicy.mayAnswerFromCache(request.fields) {
            let now = proxy.fetcher.clock.now
            var found = proxy.cache.lookup(request.key, requestHeaders: request.head.headers, now: now)
            // A fresh entry answers without reading the request's own directives, unless the operator lets a
            // client's no-cache through.
            if case .fresh(let entry) = found, !honorsClientNoCache {
                return sink.writeStored(
                    entry,
                    presentation(of: entry, .hit, request: request, proxy: proxy, now: now, makesCodings: true)
                )
            }
            if case .varyMiss = found, let entry = languageVariant(for: request, proxy: proxy, now: now) {
                found = .fresh(entry)
            }
            let directives = ClientCacheDirectives(headers: request.head.headers)
            switch directives.step(found: found, honorsNoCache: honorsClientNoCache, at: now) {
            case .hit(let entry):
                return sink.writeStored(
                    entry,
                    presentation(of: entry, .hit, request: request, proxy: proxy, now: now, makesCodings: true)
                )
            case .staleWhileRefreshing(let entry):
                proxy.cache.recordStaleServe(request.key)
                let refresh = fill(request, staleEntry: entry, proxy: proxy, client: sink.client)
                sink.writeStored(entry, presentation(of: entry, .stale, request: request, proxy: proxy, now: now))
                return proxy.fetcher.refreshInBackground(refresh, on: sink.eventLoop)
            case .stale(let entry):
                proxy.cache.recordStaleServe(request.key)
                return sink.writeStored(
                    entry,
                    presentation(of: entry, .stale, request: request, proxy: proxy, now: now, makesCodings: true)
                )
            case .notCached:
                let status = CacheStatus(detail: "only-if-cached")
                return sink.write(
                    Self.notCached,
                    annotation: proxy.cacheReporting.annotation(.miss, status, key: request.key)
                )
            case .fetch(let entry):
                staleEntry = entry
            }
            reason = Self.forwardReason(found)
            // No whole response: the parts held of it may answer, or a range goes up as a range.
            if staleEntry == nil, case .miss = found, request.head.method.isGET,
                respondWithParts(to: request, reason, proxy: proxy, sink: sink, now: now)
            {
                return
            }
        } else if ClientCacheDirectives(headers: request.head.headers).onlyIfCached {
            // Answers from the cache are not for this request (its Authorization), and it may not go upstream.
            let status = CacheStatus(detail: "only-if-cached")
            return sink.write(
                Self.notCached,
                annotation: proxy.cacheReporting.annotation(.bypass, status, key: request.key)
            )
        } else {
            reason = .request
        }
        fetchWhole(request, reason, staleEntry: staleEntry, proxy: proxy, sink: sink)
    }

    /// Answers a request the cache could not answer with what a fill of its whole representation brings: stored,
    /// revalidated, a stale stand-in, or streamed when too large to hold.
    func fetchWhole(
        _ request: CacheRequest,
        _ reason: CacheStatus.Forward,
        staleEntry: CachedResponse?,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        // Its last fill was too large to hold: streamed at once, without a fill that would be cut off again.
        if staleEntry == nil, proxy.client.streamsResponses,
            proxy.fetcher.oversizedMarks.isMarked(request.key, now: proxy.fetcher.clock.now)
        {
            return stream(request, reason, because: nil, proxy: proxy, sink: sink)
        }
        // The fetch completes on the sink's loop.
        let boundSink = NIOLoopBound(sink, eventLoop: sink.eventLoop)
        let takesInterim = InterimRelay.reaches(request.head.version)
        // The id the backend is sent, returned to the client with the answer, and the span it is sent as a child of
        // (a coalesced request's fill carries its leader's).
        let requester = RequestID.upstreamIdentity(
            of: request.head,
            notes: sink.accessNotes,
            fields: request.fields
        )
        let requestID = requester.requestID
        let fetch = fill(
            request,
            staleEntry: staleEntry,
            proxy: proxy,
            client: sink.client,
            requester: requester,
            interim: takesInterim ? InterimRelay(sink: boundSink) : nil
        )
        // Noted for the access line only: without one the clock is not read.
        let asked = sink.accessNotes?.clock.now
        proxy.fetcher.fetch(fetch, on: sink.eventLoop) { result, leader in
            if let notes = boundSink.value.accessNotes {
                if let asked { notes.upstreamAnswered(since: asked) }
                if let leader { notes.tookFill(of: leader) }
            }
            self.answer(
                request,
                reason,
                collapsed: leader != nil,
                with: result,
                requestID: requestID,
                proxy: proxy,
                sink: boundSink.value
            )
        }
    }

    /// A stored response in the language `request` prefers most, when its own variant is missing
    /// (``LanguageVariants``): looked up under the key a request stating just that language would have.
    private func languageVariant(for request: CacheRequest, proxy: ProxyContext, now: NIODeadline) -> CachedResponse? {
        let headers = request.head.headers
        for range in LanguageVariants.preferred(acceptLanguage: headers["accept-language"]) {
            var stating = headers
            stating.replaceOrAdd(name: "Accept-Language", value: range)
            let key = proxy.router.cacheKey(
                target: request.target,
                platform: request.platform,
                headers: stating,
                policy: request.policy
            )
            if let entry = proxy.cache.languageVariant(
                key,
                range: range,
                alternateHeaders: stating,
                now: now,
                insteadOf: request.key,
                requestHeaders: headers
            ) {
                return entry
            }
        }
        return nil
    }

    /// Why a request the cache could not answer goes to the backend, from what the lookup found.
    private static func forwardReason(_ found: ResponseCache.Lookup) -> CacheStatus.Forward {
        switch found {
        case .fresh: .request  // Only a client's no-cache sends a fresh entry's request upstream.
        case .stale: .stale
        case .miss: .uriMiss
        case .varyMiss: .varyMiss
        }
    }

    /// Seconds of freshness `entry` has left at `now`, negative past its lifetime, for `Cache-Status`.
    private static func ttl(of entry: CachedResponse, at now: NIODeadline) -> Int64 {
        entry.isFresh(at: now) ? entry.remainingLifetime(at: now) : -entry.stalenessNanoseconds(at: now) / 1_000_000_000
    }

    /// Answers a request that missed with what its fetch produced; `collapsed` when it took another request's.
    func answer(
        _ request: CacheRequest,
        _ reason: CacheStatus.Forward,
        collapsed: Bool,
        with result: Result<ComponentFetcher.Outcome, any Error>,
        requestID: String,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        let now = proxy.fetcher.clock.now
        var status = CacheStatus(forward: reason, collapsed: collapsed)
        /// Answers with `entry`, presented with `status` as the case has left it.
        func write(_ entry: CachedResponse, _ cacheResult: CacheResult, makesCodings: Bool) {
            sink.writeStored(
                entry,
                presentation(
                    of: entry,
                    cacheResult,
                    status,
                    request: request,
                    requestID: requestID,
                    proxy: proxy,
                    now: now,
                    makesCodings: makesCodings
                )
            )
        }
        // Stored and revalidated entries are logged by the fetcher, with their size and lifetime.
        switch result {
        case .success(.stored(let entry)):
            status.forwardStatus = entry.status.code
            status.stored = true
            // The fill sent its own client's coding to be made; a collapsed waiter may take another.
            write(entry, .miss, makesCodings: collapsed)
        case .success(.invalidated(let entry, let why)):
            // Asked for before an invalidation that reached it: this request gets it, the cache does not keep it.
            proxy.logger.debug(
                "miss, invalidated in flight",
                metadata: ["key": "\(request.key)", "reason": "\(why)", "request_id": .string(requestID)]
            )
            status.forwardStatus = entry.status.code
            status.detail = "invalidated"
            write(entry, .miss, makesCodings: false)
        case .success(.revalidated(let entry)):
            status.forwardStatus = HTTPResponseStatus.notModified.code
            status.stored = true
            write(entry, .revalidated, makesCodings: true)
        case .success(.servedStale(let entry, let why, let backendStatus)):
            // The fetcher logged the failure it stood in for, once per key and interval.
            proxy.logger.debug(
                "serving stale",
                metadata: ["key": "\(request.key)", "reason": "\(why)", "request_id": .string(requestID)]
            )
            proxy.cache.recordStaleServe(request.key)
            status.forwardStatus = backendStatus
            status.detail = "stale-if-error"
            write(entry, .stale, makesCodings: true)
        case .success(.notStored(let response, let why)):
            proxy.logger.debug(
                "miss, not stored",
                metadata: ["key": "\(request.key)", "reason": "\(why)", "request_id": .string(requestID)]
            )
            status.forwardStatus = response.status.code
            var headers = response.headers
            headers.replaceOrAdd(name: "X-Request-Id", value: requestID)
            sink.write(
                UpstreamResponse(status: response.status, headers: headers, body: response.body),
                forwarded: true,
                annotation: proxy.cacheReporting.annotation(.bypass, status, key: request.key),
                clientFields: proxy.clientFields(for: request.policy)
            )
        case .failure(let error):
            let proxyError =
                error as? ProxyError
                ?? ProxyError(.internalError, "the fetch failed inside the proxy", detail: "\(error)")
            if proxyError.kind == .upstreamTooLarge || proxyError.kind == .fillBudgetFull,
                proxy.client.streamsResponses
            {
                // Only the resource's own size is remembered: a full budget is a moment's state.
                if proxyError.kind == .upstreamTooLarge {
                    proxy.fetcher.oversizedMarks.mark(request.key, now: proxy.fetcher.clock.now)
                }
                return stream(request, reason, because: proxyError, proxy: proxy, sink: sink)
            }
            // An invalid component was logged by the fetcher that found it.
            if proxyError.kind != .decoding {
                proxy.fetcher.failureLog.log(
                    level: .info,
                    "miss, upstream failed",
                    key: request.key.target,
                    kind: proxyError.kind.description,
                    metadata: ["key": "\(request.key)", "error": "\(proxyError)", "request_id": .string(requestID)]
                )
            }
            status.detail = proxyError.kind.description
            sink.write(proxyError, annotation: proxy.cacheReporting.annotation(.miss, status, key: request.key))
        }
    }

    /// Answers a request whose response is too large to hold for the cache (over `upstream.maxResponseBytes`, or
    /// past what all fills may buffer at once, `upstream.maxBufferedBytes`): it is forwarded and its answer
    /// streamed to the client as it comes, not stored, so memory stays bounded whatever the backend sends.
    ///
    /// Identical GETs that ask for the same answer (``CacheFillPolicy/mayShareStream(requestHeaders:)``) share one
    /// stream: a request joins
    /// the one in flight for its key until that one's head comes, so a burst of them (a fill's coalesced waiters,
    /// or misses of a key marked too large) costs the backend one request, not one each.
    ///
    /// - Parameter reason: why the fill was given up; nil when the key was already marked too large.
    private func stream(
        _ request: CacheRequest,
        _ forward: CacheStatus.Forward,
        because reason: ProxyError?,
        alone: Bool = false,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        if let reason {
            proxy.fetcher.failureLog.log(
                level: .info,
                "miss too large to buffer, streamed and not stored",
                key: request.key.target,
                kind: "streamed",
                metadata: ["key": "\(request.key)", "reason": "\(reason.message)"]
            )
        }
        let head = request.head
        let annotation = proxy.cacheReporting.annotation(.bypass, CacheStatus(forward: forward), key: request.key)
        // Keyed like a stored answer, it says so alike.
        let clientFields = proxy.clientFields(for: request.policy)
        guard !alone, head.method.isGET, CacheFillPolicy.mayShareStream(requestHeaders: head.headers) else {
            return PassThroughResponder().respond(
                to: head,
                target: request.target,
                platform: request.platform,
                requestFields: request.fields,
                annotation: annotation,
                body: .none,
                fillsCache: true,
                clientFields: clientFields,
                proxy: proxy,
                sink: sink
            )
        }
        let requester = RequestID.upstreamIdentity(
            of: head,
            notes: sink.accessNotes,
            fields: request.fields
        )
        let requestID = requester.requestID
        let relay = PassThroughResponder.relay(
            for: head,
            target: request.target,
            annotation: annotation,
            invalidator: proxy.invalidator,
            clientFields: clientFields,
            requestID: requestID,
            to: sink
        )
        let boundSink = NIOLoopBound(sink, eventLoop: sink.eventLoop)
        let subscriber = SharedResponseStream.Subscriber(
            sink: relay,
            eventLoop: sink.eventLoop,
            failed: { error in relay.fail(with: error) },
            goAlone: { [self] in
                stream(request, forward, because: nil, alone: true, proxy: proxy, sink: boundSink.value)
            }
        )
        var upstream = PassThroughResponder.upstreamRequest(
            for: head,
            target: request.target,
            platform: request.platform,
            requestFields: request.fields,
            proxy: proxy,
            sink: sink,
            requester: requester
        )
        // A miss all the same: it must not wait behind forwards for a connection.
        upstream.fillsCache = true
        let streams = proxy.fetcher.sharedStreams
        let identity = CacheFillPolicy.streamSharingIdentity(upstreamFields: upstream.fields)
        guard let stream = streams.joinOrLead(request.key, request: identity, subscriber, on: sink.eventLoop)
        else { return relay.markCollapsed() }
        let failureLog = proxy.fetcher.failureLog
        let logger = proxy.logger
        let (key, target) = (request.key, request.target)
        proxy.client.forward(upstream, body: nil, on: sink.eventLoop, to: stream) { result in
            streams.ended(key, request: identity, stream)
            switch result {
            case .success:
                // Ended: no one is left to tell. A client that never called the end would leave them waiting.
                stream.fail(ProxyError(.network, "the backend's answer ended without its end"))
            case .failure(let error) where error is SharedResponseStream.NoSubscriberLeft:
                logger.debug(
                    "every client of a shared stream went away; stopped",
                    metadata: ["key": "\(key)", "request_id": .string(requestID)]
                )
            case .failure(let error):
                stream.fail(
                    PassThroughResponder.logFailure(
                        error,
                        of: head,
                        target: target,
                        requestID: requestID,
                        in: failureLog
                    )
                )
            }
        }
    }

    /// The fetch that fills the request's entry, with the client's forwarding details; `interim` passes the
    /// backend's interim responses to the client (not to a coalesced waiter: the exchange is its leader's).
    func fill(
        _ request: CacheRequest,
        staleEntry: CachedResponse?,
        proxy: ProxyContext,
        client: ClientPeer,
        requester: UpstreamIdentity? = nil,
        interim: InterimRelay? = nil
    ) -> ComponentFetcher.Request {
        proxy.cacheFill(
            key: request.key,
            target: request.target,
            platform: request.platform,
            clientHeaders: request.head.headers,
            clientFields: request.fields,
            policy: request.policy,
            staleEntry: staleEntry,
            clientAddress: client.address,
            clientIsTrustedProxy: client.isTrustedProxy,
            received: client.received(request.head.version),
            lastUpstreamFields: client.lastUpstreamFields,
            followActions: followActions,
            requester: requester,
            interim: interim,
            acceptEncoding: request.acceptEncoding
        )
    }

    /// Whether `entry` is filed under the request's own key and variant, where its compression's result is stored:
    /// not an entry found filed for another language (``ComponentFetcher/fileUnderLanguages(_:for:ticket:)``), whose
    /// compression would claim it and find no place to store the result, leaving its own key's clients without the
    /// coding.
    private static func isFiledUnder(_ request: CacheRequest, _ entry: CachedResponse) -> Bool {
        entry.varyNames.isEmpty
            || ResponseCache.variantValue(names: entry.varyNames, requestHeaders: request.head.headers) == entry.variant
    }

    /// How an entry answers this request: in full, or as a 304 when the client's validator matches.
    ///
    /// `status` is the `Cache-Status` of an entry the backend just gave or confirmed; without it the entry is
    /// served from the cache, a hit.
    private func presentation(
        of entry: CachedResponse,
        _ cacheResult: CacheResult,
        _ status: CacheStatus? = nil,
        request: CacheRequest,
        requestID: String? = nil,
        proxy: ProxyContext,
        now: NIODeadline,
        makesCodings: Bool = false
    ) -> EntryPresentation {
        var status = status ?? CacheStatus(hit: true)
        status.ttl = Self.ttl(of: entry, at: now)
        var presentation = EntryPresentation(
            annotation: proxy.cacheReporting.annotation(cacheResult, status, key: request.key),
            age: entry.ageSeconds(at: now)
        )
        let headers = request.head.headers
        // A hit returns the client's own id; an answer the backend was asked for, the id it was sent.
        // Searched for only when the router saw one.
        presentation.requestID =
            requestID ?? (request.fields.contains(.requestID) ? RequestID.given(in: headers) : nil)
        // Only an entry kept compressed, or to be, looks at the request's `Accept-Encoding`. With `makesCodings`, a
        // coding the client would rather have and the entry does not keep yet is made now, for the next requests:
        // this one gets what is kept. (Not for a fill's own answer, which sent its client's coding to be made, nor
        // for a stale answer whose refresh will make it.)
        if !entry.codings.isEmpty || (makesCodings && !entry.pendingCodings.isEmpty) {
            let negotiated = entry.negotiate(acceptEncoding: request.acceptEncoding)
            presentation.coding = negotiated.send
            if makesCodings, let coding = negotiated.make, Self.isFiledUnder(request, entry) {
                proxy.fetcher.compressOnHit(entry, in: coding, for: request.key)
            }
        }
        // Compared by code: `HTTPResponseStatus` equality compares reason phrases too.
        let isOK = entry.status.code == 200
        if beagleHash {
            presentation.beagleMaxAge = entry.remainingLifetime(at: now)
            // Beagle 1.x clients only ever get a 304 for the hash they sent.
            presentation.notModified = headers.first(name: "beagle-hash").map(entry.hasContentHash) ?? false
        } else if isOK, !request.fields.isDisjoint(with: .conditions) {
            // The validator of the form this request gets: another form's does not match it.
            presentation.notModified = ConditionalRequest.isNotModified(
                requestHeaders: headers,
                etag: presentation.coding.map { ContentNegotiation.etag(entry.etag, for: $0) } ?? entry.etag,
                lastModified: entry.lastModified,
                storedDate: {
                    entry.headers.first(name: "date").flatMap { HTTPDate.parse($0) }
                        ?? proxy.fetcher.clock.calendarSeconds - (now - entry.storedAt).nanoseconds / 1_000_000_000
                }
            )
        }
        // A range of the stored whole (RFC 9110 section 14), in either form; a condition that answers 304 comes
        // first, and a HEAD gets the whole head. The method is looked at last: almost no request has a Range.
        if isOK, !presentation.notModified, request.fields.contains(.range), !request.isHead {
            // Ranges are of the form this request gets (RFC 9110 section 14.1.2: of the selected representation).
            let form = entry.form(presentation.coding)
            let decision = RangeRequest.decide(
                headers: headers,
                length: form.bodyLength,
                etag: form.etag,
                lastModified: entry.lastModified,
                date: { entry.headers.first(name: "date") }
            )
            if decision != .whole { presentation.range = decision }
        }
        return presentation
    }
}
