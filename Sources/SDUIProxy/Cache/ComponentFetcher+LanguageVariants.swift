import NIOHTTP1
import SDUIProxyCore

extension ComponentFetcher {
    /// Files `entry`, just stored for `request` by the fill of `ticket`, also under the key a request stating
    /// just each language its `Content-Language` lists would have (``LanguageVariants``), where nothing is
    /// stored, so that a request preferring that language most finds it whatever else its `Accept-Language`
    /// lists. Only where variants are chosen by `Accept-Language`: the route's `vary` or the backend's `Vary`
    /// names it. Each filing is an entry of the cache's, counted in its byte budget, evicted and purged as any.
    func fileUnderLanguages(_ entry: CachedResponse, for request: Request, ticket: InvalidationHistory.Ticket) {
        let routeVaries = request.policy.vary.contains { $0.lowercased() == "accept-language" }
        guard routeVaries || entry.varyNames.contains("accept-language"),
            let language = entry.headers.first(name: "content-language")
        else { return }
        let own = VaryValue.of("accept-language", in: request.clientHeaders)
        for range in LanguageVariants.ranges(answeredBy: language) where range != own {
            var headers = request.clientHeaders
            headers.replaceOrAdd(name: "Accept-Language", value: range)
            let key = CacheKey.forRoute(
                target: request.key.target,
                platform: String(request.key.platform),
                headers: headers,
                vary: request.policy.vary,
                platformHeader: platformHeader
            )
            let variant = ResponseCache.variantValue(names: entry.varyNames, requestHeaders: headers)
            cache.fileAlternate(entry, for: key, variant: variant, ticket: ticket)
        }
    }
}
