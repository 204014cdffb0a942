import NIOCore

/// What an entry is made from besides the backend's response: its bodies in content codings, and the metadata the
/// fetch worked out for it.
extension CachedResponse {
    /// A body in a content coding, to keep beside the identity one.
    public struct EncodedBody: Sendable {
        public var coding: ContentCoding
        public var body: ByteBuffer

        public init(coding: ContentCoding, body: ByteBuffer) {
            self.coding = coding
            self.body = body
        }
    }

    /// Everything about an entry that is not the response itself.
    public struct Metadata: Sendable {
        public var storedAt: NIODeadline
        public var initialAge: Int64
        public var freshnessLifetime: Int64
        /// Seconds of stale-if-error the route allows, used when the response itself gives none.
        public var configuredStaleIfError: Int64 = 0
        public var varyNames: [String] = []
        public var variant: String = ""
        /// The response header whose space-separated values are purge tags.
        public var tagHeader: String = "surrogate-key"
        /// What the stored head changes for clients: the request fields the key includes named in `Vary`, and
        /// the tag field left out (its tags still in ``CachedResponse/tags``). Applied here, once, so that a hit
        /// writes the stored head as it is.
        public var clientFields = ClientFacingFields()
        /// Whether the entry's ``CachedResponse/contentHash`` will be asked for on every hit (Beagle 1.x clients),
        /// so it is worth computing once when the entry is made.
        public var computesContentHash = true
        /// Whether the response is of a type the proxy compresses: its `Vary` names `Accept-Encoding` from the
        /// start, in every form, so that a cache downstream that gets the identity form before the coded ones
        /// exist never gives it for the coded ones' requests, nor the reverse.
        public var variesByEncoding = false
        /// The codings the body is to be kept in but is not yet (``CachedResponse/pendingCodings``): those of
        /// `encodedBodies` are taken out when the entry is made.
        public var pendingCodings: ContentNegotiation.Codings = []

        public init(storedAt: NIODeadline, initialAge: Int64, freshnessLifetime: Int64) {
            self.storedAt = storedAt
            self.initialAge = initialAge
            self.freshnessLifetime = freshnessLifetime
        }
    }
}
