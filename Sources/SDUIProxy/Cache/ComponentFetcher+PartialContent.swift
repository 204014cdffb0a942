import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Fetches of byte ranges (``PartialContentPlan``): the backend is asked for a range, and its 206 is held with the
/// parts of the same representation (RFC 9111 sections 3.3 and 3.4); parts that come to hold every byte are
/// stored as a whole response, by the same rules as a fill's.
extension ComponentFetcher {
    /// What a fetch of a range brought.
    enum PartOutcome: Sendable {
        /// The backend's 206, with the parts held beside it (stored, or not when the cache would not keep them):
        /// what the request's range is cut from.
        case parts(PartialContent)
        /// Anything else, as a fill's outcome: a whole response stored (the parts completed, or a 200 in place of a
        /// 206), or an answer not stored, which goes to the client as it came.
        case outcome(Outcome)
    }

    /// Asks the backend for `range` of `request`'s target (with `ifRange`, the held parts' tag, so that only a 206
    /// of the same representation comes back), and holds or stores what it answers. Never coalesced: each range
    /// is its own request. Completes on `eventLoop`.
    func fetchPart(
        _ request: Request,
        range: String,
        ifRange: String?,
        maxParts: Int,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<PartOutcome, any Error>) -> Void
    ) {
        var upstream = request.upstream
        upstream.fields.replaceOrAdd(name: "Range", value: range)
        if let ifRange { upstream.fields.replaceOrAdd(name: "If-Range", value: ifRange) }
        let exchange = Exchange(
            fetcher: self,
            eventLoop: eventLoop,
            completion: { _, _ in },
            coalescedRun: nil,
            ticket: cache.beginFill(target: request.key.target),
            requestTime: clock.calendarSeconds,
            started: .now()
        )
        let ended: @Sendable (Result<UpstreamResponse, any Error>) -> Void = { result in
            eventLoop.assertInEventLoop()
            defer { self.cache.endFill(exchange.ticket) }
            switch result {
            case .success:
                self.metrics.upstreamCompleted(after: NIODeadline.now() - exchange.started)
            case .failure(let error):
                self.metrics.upstreamFailed(kind: (error as? ProxyError)?.kind ?? .network)
            }
            completion(
                result.flatMap { response in
                    Result { () throws(ProxyError) in
                        try self.partOutcome(of: response, for: request, maxParts: maxParts, exchange)
                    }.mapError { $0 }
                }
            )
        }
        let loopBound: @Sendable (Result<UpstreamResponse, any Error>) -> Void = { result in
            if eventLoop.inEventLoop { ended(result) } else { eventLoop.execute { ended(result) } }
        }
        if let bufferBudget {
            client.fetch(
                upstream,
                maxBodyBytes: maxResponseBytes,
                budget: bufferBudget,
                on: eventLoop,
                completion: loopBound
            )
        } else {
            client.fetch(upstream, maxBodyBytes: maxResponseBytes, on: eventLoop, completion: loopBound)
        }
    }

    /// What the backend's answer to a range request becomes.
    private func partOutcome(
        of response: UpstreamResponse,
        for request: Request,
        maxParts: Int,
        _ exchange: borrowing Exchange
    ) throws(ProxyError) -> PartOutcome {
        var noPlan: StoredPlan?  // A part starts no prefetch; a whole stored from parts is a JSON screen rarely.
        guard response.status == .partialContent else {
            // A 200 (the representation changed, or the backend serves no ranges) is a fill's answer. Anything else
            // answered a range, not the target: never stored under the key a plain GET looks up.
            guard response.status == .ok else {
                return .outcome(.notStored(response, reason: "an answer to a range, status \(response.status.code)"))
            }
            return .outcome(try process(response, for: request, exchange, &noPlan))
        }
        let new: PartialContent
        switch heldPart(of: response, for: request, requestTime: exchange.requestTime) {
        case .success(let part): new = part
        case .failure(let error): return .outcome(.notStored(response, reason: error.reason))
        }
        let held = cache.partialContent(for: request.key)
        switch PartialContent.combining(held, with: new, maxParts: maxParts, maxBytes: maxResponseBytes) {
        case .whole(let body):
            // Every byte is here: a whole 200, with the newest part's fields (its `Age` too, which the whole's age
            // counts from), stored as a fill's answer is.
            var headers = new.headers
            headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
            if let age = response.fields.first("age") { headers.replaceOrAdd(name: "Age", value: age) }
            let whole = UpstreamResponse(status: .ok, headers: headers, body: body)
            let outcome = try process(whole, for: request, exchange, &noPlan)
            if case .stored = outcome {} else { cache.removePartial(for: request.key) }
            return .outcome(outcome)
        case .parts(let combined):
            cache.storePartial(combined, for: request.key, ticket: exchange.ticket)
            return .parts(combined)
        case .tooFragmented:
            logger.debug("part not held: cache.maxPartsPerEntry reached", metadata: request.logMetadata())
            return .parts(new)
        case .tooLarge:
            logger.debug(
                "part not held: the parts would hold more than upstream.maxResponseBytes",
                metadata: request.logMetadata()
            )
            return .parts(new)
        }
    }

    /// The part a 206 holds, or why it is not held: one range of a known length, under a strong tag, in identity,
    /// varying on nothing the key does not cover, and storable by the rules a 200 would be stored by.
    private func heldPart(
        of response: UpstreamResponse,
        for request: Request,
        requestTime: Int64
    ) -> Result<PartialContent, PartError> {
        let fields = response.fields
        guard let value = fields.first("content-range"), let range = ContentRange(value),
            range.count == response.body.readableBytes
        else { return .failure("a 206 without one byte range of a known length") }
        guard let etag = fields.first("etag"), etag.hasPrefix("\"") else {
            return .failure("a 206 without a strong entity tag, whose parts could not be joined")
        }
        guard !fields.contains("content-encoding") else { return .failure("a 206 in a content coding") }
        guard varyNames(in: fields, keyedBy: request.policy.vary).isEmpty else {
            return .failure("a 206 that varies on request fields beyond the key")
        }
        let policy = request.fillPolicy(storageRules)
        let directives = policy.rules.directives(of: fields)
        // The part is fresh for as long as the whole representation would be.
        guard case .store(let lifetime) = policy.storeDecision(status: .ok, fields: fields, directives: directives)
        else { return .failure("a 206 whose representation may not be stored") }
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(response.headers)
        headers.remove(name: "content-range")
        headers.remove(name: "content-length")
        headers.remove(name: "age")
        // Read as a stored response's are, so that a purge by tag reaches the parts alike.
        var tags: [String] = []
        fields.forEachField { name, value in
            if HTTPSyntax.sameIgnoringCase(bytes: name, tagHeader) { tags += CachedResponse.purgeTags(in: value) }
        }
        return .success(
            PartialContent(
                etag: etag,
                range: range,
                body: response.body,
                headers: headers,
                tags: tags,
                storedAt: clock.now,
                initialAge: initialAge(of: fields, requestTime: requestTime),
                freshnessLifetime: lifetime
            )
        )
    }

    /// Why a 206 is not held.
    struct PartError: Error, ExpressibleByStringLiteral {
        let reason: String
        init(stringLiteral reason: String) { self.reason = reason }
    }
}
