import NIOCore
import NIOHTTP1
import SDUIProxyCore

extension ComponentFetcher {
    /// A 304 for a stale entry: merge the new headers, restart freshness, store (RFC 9111 section 4.3.4).
    func revalidate(
        _ stale: CachedResponse,
        with headers: HTTPHeaders,
        for request: Request,
        _ policy: CacheFillPolicy,
        _ exchange: borrowing Exchange
    ) -> Outcome {
        let requestTime = exchange.requestTime
        var updates = UpstreamRequestBuilder.endToEndResponseHeaders(headers)
        // A 304 without a Date is dated on receipt (RFC 9110 section 6.6.1). The entry's old Date would make
        // the refreshed entry as old as the first answer: stale again at once, revalidated on every request.
        if !updates.contains(name: "date") { updates.add(name: "Date", value: HTTPDate.format(clock.calendarSeconds)) }
        var merged = stale.headers(updatedBy: updates)
        // The stored head clients see may lack the tag field; the entry's tags hold on unless the 304 brings new.
        if !stale.tags.isEmpty, !merged.contains(name: tagHeader) {
            merged.add(name: tagHeader, value: stale.tags.joined(separator: " "))
        }
        let mergedFields = HTTPFieldLines(merged)
        let directives = policy.rules.directives(of: mergedFields)
        let lifetime: Int64
        switch policy.revalidatedDecision(status: stale.status, mergedFields: mergedFields, directives: directives) {
        case .store(let storedLifetime):
            lifetime = storedLifetime
        case .doNotStore(let reason, let dropsStaleEntry):
            if dropsStaleEntry { dropStaleEntry(of: request) }
            return .notStored(UpstreamResponse(status: stale.status, headers: merged, body: stale.body), reason: reason)
        }
        var metadata = metadata(for: mergedFields, request: request, lifetime: lifetime, requestTime: requestTime)
        let compression = compressor?.plan(for: mergedFields, bodyLength: stale.bodyLength)
        metadata.variesByEncoding = !stale.encodedForms.isEmpty || compression?.variesByEncoding == true
        // The codings no client had asked for yet (or whose compression was skipped) still wait for one that does.
        if compression?.compresses == true, let compressor {
            metadata.pendingCodings = stale.pendingCodings.intersection(compressor.configuredCodings)
        }
        // The body is the one stored, and so are its coded forms: kept, not compressed again.
        let refreshed = CachedResponse(
            status: stale.status,
            fields: mergedFields,
            body: stale.body,
            metadata: metadata,
            directives: directives,
            encodedBodies: stale.encodedForms.compactMap { form in
                form.coding.map { CachedResponse.EncodedBody(coding: $0, body: form.body) }
            }
        )
        // The 304 confirms what was stored when it was asked for: an invalidation since reaches it all the same.
        switch store(refreshed, for: request, exchange) {
        case .stored(let entry), .storedStale(let entry):
            cache.recordRevalidation(request.key)
            logger.debug("revalidated", metadata: request.logMetadata(["ttl": "\(lifetime)"]))
            return .revalidated(entry)
        case .voided(let reason):
            return .invalidated(refreshed, reason: reason)
        case .rejected:
            cache.recordRevalidation(request.key)
            return .revalidated(refreshed)
        }
    }

    /// Removes the request's stale entry, which the fill policy says must not be served stale later. Only that
    /// entry goes, not the target's other platforms and variants, which other answers filled.
    func dropStaleEntry(of request: Request) {
        guard let stale = request.staleEntry else { return }
        cache.remove(stale, storedFor: request.key)
    }
}
