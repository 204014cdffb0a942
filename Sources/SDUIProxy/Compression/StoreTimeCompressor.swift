import Logging
import NIOCore
import SDUIProxyCore

/// Keeps the responses the cache stores in the content codings `compression` names: each body compressed once,
/// when it is stored, so that a hit in any coding writes bytes made beforehand, as an identity hit does.
///
/// Compressing is the dearest thing a fill does: brotli at level 5 and gzip at 6 take about 700,000 instructions
/// for a 2.4 KB screen (callgrind), four times the rest of the miss. On the event loop that would hold up every
/// connection of the loop for a fraction of a millisecond at each store; so the entry is stored in identity and
/// answered at once, and the body is compressed on a ``CompressionPool``, whose job adds the forms to the entry
/// if it is still the one stored then (``ResponseCache/storeCompressed(_:replacing:for:)``). Without a pool
/// (a fetcher made for a test) bodies are compressed before they are stored.
struct StoreTimeCompressor: Sendable {
    let configuration: CompressionConfiguration
    /// Where bodies are compressed; without one, each is compressed where it is stored.
    let pool: CompressionPool?
    let metrics: ProxyMetrics
    let logger: Logger

    /// What becomes of a body being stored.
    enum Plan: Equatable {
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
    }

    /// What becomes of a response whose fields are `fields`, with a body of `bodyLength` bytes: its
    /// `Content-Type` read where it lies, once per fill.
    func plan(for fields: HTTPFieldLines, bodyLength: Int) -> Plan {
        guard configuration.isEnabled,
            fields.withFirstValue(of: "content-type", { configuration.compresses(contentType: $0) }) == true
        else { return .identityOnly }
        return plan(ofListedTypeWithLength: bodyLength)
    }

    private func plan(ofListedTypeWithLength bodyLength: Int) -> Plan {
        guard bodyLength >= configuration.minBytes else { return .tooSmall }
        return pool == nil ? .now : .later
    }

    /// `body` in each configured coding that makes it smaller; a coding that does not is left out, as is one
    /// that fails (logged: that is a fault of the proxy's, never of the body's).
    func encode(_ body: ByteBuffer) -> [CachedResponse.EncodedBody] {
        var encoded: [CachedResponse.EncodedBody] = []
        for coding in configuration.encodings {
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

    /// Compresses `entry`'s body on the pool, then adds the forms to it if it is still what is stored for `key`,
    /// from the pool's thread: the cache is shared, and the loop has nothing more to do with it. When the pool is
    /// full the entry stays in identity (counted, and logged at debug level) until a hit sends it again
    /// (``compressOnHit(_:for:acceptEncoding:in:whenDone:)``). Returns whether a job started: not when the pool is
    /// full, or the entry's compression is already under way.
    ///
    /// - Parameter whenDone: called when the job has ended (where ``CompressionPool/submit(_:finished:)`` calls
    ///   `finished`), for a caller that waits for it (a test); a fill does not.
    @discardableResult
    func compressLater(
        _ entry: CachedResponse,
        for key: CacheKey,
        in cache: ResponseCache,
        whenDone: (@Sendable () -> Void)? = nil
    ) -> Bool {
        guard let pool, entry.claimCompression() else { return false }
        let started = pool.submit {
            // A small body is stored in the entry's own array, and copied into a buffer for the coders: on the
            // pool's thread, not the event loop that stored it.
            let encoded = encode(entry.body)
            guard !encoded.isEmpty else { return }
            cache.storeCompressed(entry.adding(encoded), replacing: entry, for: key)
        } finished: { ran in
            // A pool shutting down drops the job: a later hit may try again. A body no coding made smaller keeps
            // the claim, and is not compressed again.
            if ran == nil { entry.releaseCompressionClaim() }
            whenDone?()
        }
        guard started else {
            entry.releaseCompressionClaim()
            metrics.compressionSkipped()
            logger.debug(
                "compression pool full; the entry stays uncompressed until a hit asks for a coding",
                metadata: ["key": "\(key)", "bytes": "\(entry.identity.bodyLength)"]
            )
            return false
        }
        return true
    }

    /// Sends the body of `entry`, which a hit found still awaiting its codings (its compression after it was
    /// stored skipped, the pool being full), to be compressed, when the hit's client takes a configured coding.
    /// A burst of fills leaves most of its entries skipped; this way the ones clients ask for compressed are
    /// compressed when the pool has room, once each. Returns whether a job started; `whenDone` as in
    /// ``compressLater(_:for:in:whenDone:)``.
    @discardableResult
    func compressOnHit(
        _ entry: CachedResponse,
        for key: CacheKey,
        acceptEncoding: String?,
        in cache: ResponseCache,
        whenDone: (@Sendable () -> Void)? = nil
    ) -> Bool {
        guard entry.awaitsCodings,
            ContentNegotiation.coding(
                forAcceptEncoding: acceptEncoding,
                available: ContentNegotiation.Codings(configuration.encodings)
            ) != nil,
            compressLater(entry, for: key, in: cache, whenDone: whenDone)
        else { return false }
        metrics.compressionOnHit()
        return true
    }
}
