import Logging
import NIOCore
import SDUIProxyCore

/// Keeps the responses the cache stores in the content codings `compression` names: each body compressed once per
/// coding, so that a hit in any coding writes bytes made beforehand, as an identity hit does.
///
/// A coding is made when a client that would be sent it first asks for the response (``demandedCodings(by:)``):
/// the miss that stores it, or a later hit. A coding no client asks for costs nothing, and a fill from a client
/// that takes brotli costs one encoding, not two. With `compression.eager`, and for prefetched and warmed
/// responses (made for clients yet to come), every configured coding is made when the response is stored.
///
/// Compressing is the dearest thing a fill does: brotli at level 5 takes about 550,000 instructions for a 2.4 KB
/// screen and gzip at 6 about 300,000 (callgrind), four and two times the rest of the miss. On the event loop that
/// would hold up every connection of the loop for a fraction of a millisecond at each store; so the entry is
/// stored in identity and answered at once, and the body is compressed on a ``CompressionPool``, whose job adds
/// the form to the entry if it is still the one stored then (``ResponseCache/storeCompressed(_:replacing:for:)``).
/// Without a pool (a fetcher made for a test) a fill's codings are made before it is stored, and a hit's where
/// the hit asks.
struct StoreTimeCompressor: Sendable {
    let configuration: CompressionConfiguration
    /// Where bodies are compressed; without one, each is compressed where it is stored.
    let pool: CompressionPool?
    let metrics: ProxyMetrics
    let logger: Logger
    /// The codings configured, as a stored entry keeps them pending: worked out once, not at every fill.
    let configuredCodings: ContentNegotiation.Codings

    init(configuration: CompressionConfiguration, pool: CompressionPool?, metrics: ProxyMetrics, logger: Logger) {
        self.configuration = configuration
        self.pool = pool
        self.metrics = metrics
        self.logger = logger
        self.configuredCodings = ContentNegotiation.Codings(configuration.encodings)
    }

    /// What becomes of a body being stored.
    enum Plan: Equatable, Sendable {
        /// Kept in identity: compression is off, or the response's type is not listed.
        case identityOnly
        /// Kept in identity, though of a listed type: its body is under `minBytes`.
        case tooSmall
        /// Compressed before the entry is stored (there is no pool).
        case now
        /// Stored in identity, compressed on the pool, the forms added after.
        case later

        /// Whether the response names `Accept-Encoding` in its `Vary`: every one of a type the proxy compresses,
        /// whatever its size, so a cache downstream never stores one form for another's requests.
        var variesByEncoding: Bool { self != .identityOnly }

        /// Whether the body is kept in codings, now or later.
        var compresses: Bool { self == .now || self == .later }
    }

    /// The codings a fill for `request` makes when it stores its body: every configured one when the
    /// configuration is eager or the request prepares for clients yet to come (a prefetch); else the one its
    /// client would be sent, if it takes any. A refresh also makes again those the entry it replaces was kept in:
    /// their clients asked for them already.
    func demandedCodings(by request: ComponentFetcher.Request) -> ContentNegotiation.Codings {
        let configured = configuredCodings
        if configuration.eager || request.preparesEveryCoding { return configured }
        var demanded = request.staleEntry?.codings.intersection(configured) ?? []
        if let coding = ContentNegotiation.coding(forAcceptEncoding: request.acceptEncoding, available: configured) {
            demanded.insert(ContentNegotiation.Codings(coding))
        }
        return demanded
    }

    /// What becomes of a response whose fields are `fields`, with a body of `bodyLength` bytes: its
    /// `Content-Type` read where it lies, once per fill.
    func plan(for fields: HTTPFieldLines, bodyLength: Int) -> Plan {
        guard configuration.isEnabled,
            fields.firstValue(of: "content-type", satisfies: { configuration.compresses(contentType: $0) })
        else { return .identityOnly }
        return plan(ofListedTypeWithLength: bodyLength)
    }

    private func plan(ofListedTypeWithLength bodyLength: Int) -> Plan {
        guard bodyLength >= configuration.minBytes else { return .tooSmall }
        return pool == nil ? .now : .later
    }

    /// `body` in each configured coding among `codings` that makes it smaller; a coding that does not is left
    /// out, as is one that fails (logged: that is a fault of the proxy's, never of the body's).
    func encode(_ body: ByteBuffer, in codings: ContentNegotiation.Codings) -> [CachedResponse.EncodedBody] {
        var encoded: [CachedResponse.EncodedBody] = []
        for coding in configuration.encodings where codings.contains(ContentNegotiation.Codings(coding)) {
            do {
                let compressed = try ContentCoder.encode(body, as: coding, level: configuration.level(for: coding))
                guard compressed.readableBytes < body.readableBytes else {
                    metrics.compression(coding, kept: false)
                    continue
                }
                metrics.compression(coding, kept: true)
                encoded.append(CachedResponse.EncodedBody(coding: coding, body: compressed))
            } catch {
                logger.warning(
                    "compressing a stored response failed; it is kept without that coding",
                    metadata: ["coding": "\(coding)", "bytes": "\(body.readableBytes)", "error": "\(error)"]
                )
            }
        }
        return encoded
    }

    /// Compresses `entry`'s body in `codings` on the pool, then adds the forms to it if it is still what is stored
    /// for `key`, from the pool's thread: the cache is shared, and the loop has nothing more to do with it (without
    /// a pool, here and now). When
    /// the pool is full the codings stay pending (counted, and logged at debug level) until a hit asks for one
    /// again (``compressOnHit(_:in:for:in:whenDone:)``). Returns whether a job started: not when the pool is
    /// full, or the entry's compression is already under way.
    ///
    /// - Parameter whenDone: called when the job has ended (where ``CompressionPool/submit(_:finished:)`` calls
    ///   `finished`), for a caller that waits for it (a test); a fill does not.
    @discardableResult
    func compressLater(
        _ entry: CachedResponse,
        in codings: ContentNegotiation.Codings,
        for key: CacheKey,
        in cache: ResponseCache,
        whenDone: (@Sendable () -> Void)? = nil
    ) -> Bool {
        guard entry.claimCompression() else { return false }
        // Replaced even when no coding made the body smaller: the codings tried are no longer pending, so no hit
        // asks for them again. A small body is stored in the entry's own array, and copied into a buffer for the
        // coders: on the pool's thread, not the event loop that stored it.
        let compress = { @Sendable () -> Void in
            _ = cache.storeCompressed(
                entry.adding(encode(entry.body, in: codings), tried: codings),
                replacing: entry,
                for: key
            )
        }
        guard let pool else {
            // No pool (a fetcher made for a test): compressed here, as a fill without one compresses before storing.
            compress()
            whenDone?()
            return true
        }
        let started = pool.submit(compress) { ran in
            // A pool shutting down drops the job: a later hit may try again.
            if ran == nil { entry.releaseCompressionClaim() }
            whenDone?()
        }
        guard started else {
            entry.releaseCompressionClaim()
            metrics.compressionSkipped()
            logger.debug(
                "compression pool full; the entry's codings wait for a hit that asks for one",
                metadata: ["key": "\(key)", "bytes": "\(entry.identity.bodyLength)"]
            )
            return false
        }
        return true
    }

    /// Sends the body of `entry` to be compressed in `coding`, which a hit's client would be sent but the entry
    /// does not keep yet (``CachedResponse/negotiate(acceptEncoding:)``): no client asked for it before, or its
    /// compression was skipped, the pool being full. Returns whether a job started; `whenDone` as in
    /// ``compressLater(_:in:for:in:whenDone:)``.
    @discardableResult
    func compressOnHit(
        _ entry: CachedResponse,
        in coding: ContentCoding,
        for key: CacheKey,
        in cache: ResponseCache,
        whenDone: (@Sendable () -> Void)? = nil
    ) -> Bool {
        guard compressLater(entry, in: ContentNegotiation.Codings(coding), for: key, in: cache, whenDone: whenDone)
        else { return false }
        metrics.compressionOnHit()
        return true
    }
}
