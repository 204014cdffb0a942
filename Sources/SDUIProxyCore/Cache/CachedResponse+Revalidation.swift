import NIOHTTP1

// What revalidating a stored response reads of it: the directives lookups decide by, and the headers a backend's
// 304 refreshes (RFC 9111 section 4.3.4).
extension CachedResponse {
    /// The directives a stored response is looked up by, as flags: all that lookups ask of them. The whole
    /// ``CacheControl`` took over a hundred bytes in every entry.
    public struct Revalidation: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// `no-cache`: never served without asking the backend.
        public static let noCache = Revalidation(rawValue: 1 << 0)
        public static let mustRevalidate = Revalidation(rawValue: 1 << 1)
        public static let proxyRevalidate = Revalidation(rawValue: 1 << 2)
        /// `s-maxage`, which carries `proxy-revalidate` for a shared cache (RFC 9111 section 5.2.2.10).
        public static let sharedMaxAge = Revalidation(rawValue: 1 << 3)

        public init(_ directives: CacheControl) {
            var flags: Revalidation = []
            if directives.noCache { flags.insert(.noCache) }
            if directives.mustRevalidate { flags.insert(.mustRevalidate) }
            if directives.proxyRevalidate { flags.insert(.proxyRevalidate) }
            if directives.sharedMaxAge != nil { flags.insert(.sharedMaxAge) }
            self = flags
        }

        /// Whether the response may never be served stale (RFC 9111 section 4.2.4): a client's `max-stale` does
        /// not outweigh it.
        public var forbidsStale: Bool {
            !isDisjoint(with: [.noCache, .mustRevalidate, .proxyRevalidate, .sharedMaxAge])
        }
    }
    /// This entry's headers as a 304 from the backend updates them (RFC 9111 section 4.3.4): every header the
    /// 304 carries, as it was sent, replaces the entry's headers of that name, except those about the body's
    /// framing and encoding.
    ///
    /// An entity tag the proxy computed is dropped (the entry made from these headers computes it again, or keeps
    /// the one the 304 brought).
    public func headers(updatedBy notModifiedHeaders: HTTPHeaders) -> HTTPHeaders {
        var merged = HTTPHeaders()
        // The last `Via` line is this hop's, written when the entry was made: the refreshed entry writes its own.
        var fields = Array(headers)
        if let own = fields.lastIndex(where: { $0.name.lowercased() == "via" }), fields[own].value == Self.ownVia {
            fields.remove(at: own)
        }
        merged.add(contentsOf: fields)
        if upstreamETag == nil { merged.remove(name: "etag") }
        var replaced: Set<String> = []
        for (name, value) in notModifiedHeaders {
            let lowercased = name.lowercased()
            guard !Self.headersNotUpdated.contains(lowercased) else { continue }
            if replaced.insert(lowercased).inserted { merged.remove(name: name) }
            merged.add(name: name, value: value)
        }
        return merged
    }

    private static let headersNotUpdated: Set<String> = [
        "content-length", "content-encoding", "transfer-encoding", "content-range",
    ]
}
