import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// GETs that found no whole response, answered from the parts held of it or by fetching the range they ask for
/// (``PartialContentPlan``; RFC 9111 sections 3.3 and 3.4).
extension CacheResponder {
    /// Answers `request` from held parts, or fetches the range it asks for (or, holding a prefix, the rest of the
    /// whole); false when it goes the usual way, a fill of the whole representation.
    func respondWithParts(
        to request: CacheRequest,
        _ reason: CacheStatus.Forward,
        proxy: ProxyContext,
        sink: any ResponseSink,
        now: NIODeadline
    ) -> Bool {
        let headers = request.head.headers
        let held = proxy.cache.partialContent(for: request.key)
        // Nearly every miss asks for the whole and finds no parts: nothing more to decide.
        guard held != nil || request.fields.contains(.range) else { return false }
        let fetchesParts =
            proxy.configuration.cache.rangeMiss == .part
            || (held == nil && proxy.fetcher.oversizedMarks.isMarked(request.key, now: now))
        let step = PartialContentPlan.step(
            headers: headers,
            held: held,
            now: now,
            fetchesParts: fetchesParts,
            mayServeHeld: !honorsClientNoCache || !ClientCacheDirectives(headers: headers).asksValidation,
            maxFetchBytes: proxy.fetcher.maxResponseBytes
        )
        switch step {
        case .usual:
            return false
        case .serve(let range):
            guard let held else { return false }
            proxy.cache.recordPartialHit(request.key)
            var status = CacheStatus(hit: true)
            status.ttl = (held.freshnessLifetime * 1_000_000_000 - held.ageNanoseconds(at: now)) / 1_000_000_000
            write(
                held,
                range,
                annotation: proxy.cacheReporting.annotation(.hit, status, key: request.key),
                request: request,
                requestID: nil,
                proxy: proxy,
                sink: sink,
                now: now
            )
            return true
        case .fetch(let range, let ifRange, let whole):
            fetchPart(request, reason, range: range, ifRange: ifRange, whole: whole, proxy: proxy, sink: sink)
            return true
        }
    }

    /// Asks the backend for `range` and answers with what comes: the client's range cut from the parts, or the
    /// whole stored (and presented as a stored response is), or the backend's answer as it came.
    private func fetchPart(
        _ request: CacheRequest,
        _ reason: CacheStatus.Forward,
        range: String,
        ifRange: String?,
        whole: Bool,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        let boundSink = NIOLoopBound(sink, eventLoop: sink.eventLoop)
        let requester = RequestID.upstreamIdentity(
            of: request.head,
            notes: sink.accessNotes,
            fields: request.fields
        )
        let requestID = requester.requestID
        let fetch = fill(request, staleEntry: nil, proxy: proxy, client: sink.client, requester: requester)
        let asked = sink.accessNotes?.clock.now
        proxy.fetcher.fetchPart(
            fetch,
            range: range,
            ifRange: ifRange,
            maxParts: proxy.configuration.cache.maxPartsPerEntry,
            on: sink.eventLoop
        ) { result in
            let sink = boundSink.value
            if let asked { sink.accessNotes?.upstreamAnswered(since: asked) }
            switch result {
            case .success(.parts(let content)):
                // The client's range, from what came: a request for the whole that parts do not complete (the
                // backend sent less than the rest) is fetched whole after all.
                guard !whole, let spec = request.head.headers.first(name: "range").flatMap(RangeRequest.byteRange),
                    case .part(let part) = RangeRequest.satisfy(spec, length: content.completeLength),
                    content.covers(part)
                else { return self.fetchWhole(request, reason, staleEntry: nil, proxy: proxy, sink: sink) }
                var status = CacheStatus(forward: reason)
                status.forwardStatus = HTTPResponseStatus.partialContent.code
                status.stored = proxy.cache.partialContent(for: request.key) != nil
                let annotation = proxy.cacheReporting.annotation(.miss, status, key: request.key)
                self.write(
                    content,
                    part,
                    annotation: annotation,
                    request: request,
                    requestID: requestID,
                    proxy: proxy,
                    sink: sink,
                    now: proxy.fetcher.clock.now
                )
            case .success(.outcome(.notStored(let response, _))) where whole && response.status != .ok:
                // A part that completes nothing, or an answer about a range the client did not ask for (a 416 when
                // the representation shrank): the whole, fetched as any miss.
                self.fetchWhole(request, reason, staleEntry: nil, proxy: proxy, sink: sink)
            case .success(.outcome(let outcome)):
                self.answer(
                    request,
                    reason,
                    collapsed: false,
                    with: .success(outcome),
                    requestID: requestID,
                    proxy: proxy,
                    sink: sink
                )
            case .failure(let error):
                self.answer(
                    request,
                    reason,
                    collapsed: false,
                    with: .failure(error),
                    requestID: requestID,
                    proxy: proxy,
                    sink: sink
                )
            }
        }
    }

    /// Writes `range` of the held parts as a 206 with their fields, its `Content-Range` and the parts' `Age`.
    private func write(
        _ content: PartialContent,
        _ range: ClosedRange<Int>,
        annotation: CacheAnnotation,
        request: CacheRequest,
        requestID: String?,
        proxy: ProxyContext,
        sink: any ResponseSink,
        now: NIODeadline
    ) {
        guard let body = content.bytes(range) else { preconditionFailure("a range is written only when held") }
        var headers = content.headers
        headers.replaceOrAdd(name: "Age", value: String(content.ageNanoseconds(at: now) / 1_000_000_000))
        headers.replaceOrAdd(
            name: "Content-Range",
            value: "bytes \(range.lowerBound)-\(range.upperBound)/\(content.completeLength)"
        )
        if let id = requestID ?? RequestID.given(in: request.head.headers) {
            headers.replaceOrAdd(name: "X-Request-Id", value: id)
        }
        sink.write(
            UpstreamResponse(status: .partialContent, headers: headers, body: body),
            forwarded: true,
            annotation: annotation,
            clientFields: proxy.clientFields(for: request.policy)
        )
    }
}
