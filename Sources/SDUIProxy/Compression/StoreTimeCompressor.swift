import Logging
import NIOCore
import SDUIProxyCore

/// Keeps the responses the cache stores in the content codings `compression` names: each body compressed once,
/// when it is stored, so that a hit in any coding writes bytes made beforehand, as an identity hit does.
///
/// Small bodies are compressed where the fill is answered, before the entry is stored, so its first client may
/// get them compressed. Larger ones would hold up every connection on the loop: their entry is stored in identity
/// and answered at once, and the body is compressed on a ``CompressionPool``; the forms are added to the entry
/// if it is still the one stored then (``ResponseCache/storeCompressed(_:replacing:for:)``).
struct StoreTimeCompressor: Sendable {
    let configuration: CompressionConfiguration
    /// Where larger bodies are compressed; without one, every body is compressed where it is stored.
    let pool: CompressionPool?
    let metrics: ProxyMetrics
    let logger: Logger

    /// The largest body compressed on the event loop that stores it. Brotli at level 5 and gzip at 6 take about
    /// 0.1 ms together for a 4 KiB screen, about what handing it to a thread and back costs in latency; past
    /// that, the loop's other connections would wait for every miss.
    static let largestCompressedOnLoop = 4 << 10

    /// What becomes of a body being stored.
    enum Plan: Equatable {
        /// Kept in identity only: compression is off, the type is not listed, or the body is under `minBytes`.
        case identityOnly
        /// Compressed before the entry is stored.
        case now
        /// Stored in identity, compressed on the pool, the forms added after.
        case later
    }

    /// What becomes of a response of `contentType` with a body of `bodyLength` bytes.
    func plan(contentType: String?, bodyLength: Int) -> Plan {
        guard configuration.isEnabled, bodyLength >= configuration.minBytes,
            configuration.compresses(contentType: contentType)
        else { return .identityOnly }
        return bodyLength <= Self.largestCompressedOnLoop || pool == nil ? .now : .later
    }

    /// Whether responses of `contentType` name `Accept-Encoding` in their `Vary`: every one the proxy may keep
    /// compressed, whatever its size, so a cache downstream never stores one form for another's requests.
    func variesByEncoding(contentType: String?) -> Bool {
        configuration.isEnabled && configuration.compresses(contentType: contentType)
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

    /// Compresses `entry`'s body on the pool, then adds the forms to it if it is still what is stored for `key`.
    /// When the pool is full the entry stays in identity: counted, and logged at debug level.
    func compressLater(_ entry: CachedResponse, for key: CacheKey, in cache: ResponseCache, on eventLoop: any EventLoop)
    {
        guard let pool else { return }
        let body = entry.body
        let future = pool.run(on: eventLoop) { () -> CachedResponse? in
            let encoded = encode(body)
            return encoded.isEmpty ? nil : entry.adding(encoded)
        }
        guard let future else {
            metrics.compressionSkipped()
            logger.debug(
                "compression pool full; the entry stays uncompressed",
                metadata: ["key": "\(key)", "bytes": "\(body.readableBytes)"]
            )
            return
        }
        future.whenSuccess { compressed in
            guard let compressed else { return }
            cache.storeCompressed(compressed, replacing: entry, for: key)
        }
    }
}
