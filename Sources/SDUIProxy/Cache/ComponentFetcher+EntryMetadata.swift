import NIOCore
import SDUIProxyCore

extension ComponentFetcher {
    /// What an entry made from a response's `fields` for `request` keeps beside the response: its age and
    /// lifetime, its route's stale-if-error, what clients see of its fields, and the variant it answers.
    func metadata(
        for fields: HTTPFieldLines,
        request: Request,
        lifetime: Int64,
        requestTime: Int64
    ) -> CachedResponse.Metadata {
        var metadata = CachedResponse.Metadata(
            storedAt: clock.now,
            initialAge: initialAge(of: fields, requestTime: requestTime),
            freshnessLifetime: lifetime
        )
        metadata.configuredStaleIfError = request.policy.staleIfErrorSeconds
        metadata.tagHeader = tagHeader
        metadata.clientFields =
            request.policy.vary.isEmpty
            ? plainClientFields
            : ClientFacingFields(
                keyFields: ClientFacingFields.keyFields(platformHeader: platformHeader, policy: request.policy),
                hiddenField: exposesTags ? nil : tagHeader
            )
        metadata.computesContentHash = computesContentHash
        metadata.varyNames = varyNames(in: fields, keyedBy: request.policy.vary)
        metadata.variant = ResponseCache.variantValue(names: metadata.varyNames, requestHeaders: request.clientHeaders)
        return metadata
    }

    /// The corrected initial age of a response with `fields` received now, asked for at `requestTime` (RFC 9111
    /// section 4.2.3).
    func initialAge(of fields: HTTPFieldLines, requestTime: Int64) -> Int64 {
        FreshnessPolicy.initialAge(fields: fields, requestTime: requestTime, responseTime: clock.calendarSeconds)
    }

    /// The request headers a response varies on that its cache key does not already cover: the platform, and
    /// `keyed`, the headers of the request's own route. (Another route's keyed headers are not in this key.)
    /// The proxy always fetches unencoded bodies, so `Accept-Encoding` never splits entries.
    func varyNames(in fields: HTTPFieldLines, keyedBy keyed: [String]) -> [String] {
        var names: [String] = []
        fields.forEachListMember(of: "vary") { member in
            let name = String(decoding: member, as: UTF8.self).lowercased()
            if name != "accept-encoding", name != platformHeader, !keyed.contains(name), !names.contains(name) {
                names.append(name)
            }
        }
        return names.sorted()
    }
}
