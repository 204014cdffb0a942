import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

/// Forms added to an entry after it was stored replace it only while it is still the one stored.
@Suite struct CompressedStoreTests {
    private let key = CacheKey(target: "/screens/home", platform: "WEB")

    private func entry(_ text: String, varyNames: [String] = [], variant: String = "") -> CachedResponse {
        var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        metadata.varyNames = varyNames
        metadata.variant = variant
        metadata.variesByEncoding = true
        return CachedResponse(
            status: .ok,
            headers: ["Content-Type": "application/json"],
            body: ByteBuffer(string: text),
            metadata: metadata
        )
    }

    private func found(_ cache: ResponseCache, _ headers: HTTPHeaders = [:]) -> CachedResponse? {
        guard case .fresh(let entry) = cache.lookup(key, requestHeaders: headers, now: .now()) else { return nil }
        return entry
    }

    @Test("the compressed entry takes the place of the one it was made from, and counts its forms' bytes")
    func replacesTheStoredEntry() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let stored = entry(String(repeating: "screen ", count: 100))
        #expect(cache.store(stored, for: key))
        let before = cache.statistics
        let compressed = stored.adding([.init(coding: .gzip, body: ByteBuffer(string: "small"))])
        #expect(cache.storeCompressed(compressed, replacing: stored, for: key))
        #expect(found(cache) === compressed)
        let after = cache.statistics
        #expect(after.bytes - before.bytes == compressed.byteCost - stored.byteCost)
        #expect(after.bodyBytesByForm == ["identity": 700, "br": 0, "gzip": 5])
        #expect(after.compressedEntries == 1 && after.entries == 1 && after.stores == before.stores)
    }

    @Test("an entry replaced, purged or evicted meanwhile stays so; the compression is dropped and counted")
    func droppedWhenNoLongerStored() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let first = entry("first")
        #expect(cache.store(first, for: key))
        let second = entry("second")
        #expect(cache.store(second, for: key))
        let late = first.adding([.init(coding: .br, body: ByteBuffer(string: "f"))])
        #expect(!cache.storeCompressed(late, replacing: first, for: key))
        #expect(found(cache) === second)

        _ = cache.invalidate(CacheInvalidation(.targets(["/screens/home"])), now: .now())
        let lateAgain = second.adding([.init(coding: .br, body: ByteBuffer(string: "s"))])
        #expect(!cache.storeCompressed(lateAgain, replacing: second, for: key))
        #expect(found(cache) == nil)
        #expect(cache.statistics.compressionsDropped == 2)
        #expect(cache.statistics.entries == 0)
    }

    @Test("a varying entry is replaced under its variant's key")
    func varyingEntry() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let variant = ResponseCache.variantValue(names: ["accept-language"], requestHeaders: ["Accept-Language": "fr"])
        let french = entry("bonjour", varyNames: ["accept-language"], variant: variant)
        #expect(cache.store(french, for: key))
        let compressed = french.adding([.init(coding: .gzip, body: ByteBuffer(string: "b"))])
        #expect(cache.storeCompressed(compressed, replacing: french, for: key))
        #expect(found(cache, ["Accept-Language": "fr"]) === compressed)
    }
}

/// The per-form byte counts the cache keeps as entries come and go agree with the entries it holds.
@Suite struct FormTallyTests {
    @Test("after any mix of stores, compressions, replacements, purges and evictions, the counts are what is stored")
    func tallyMatchesTheEntries() {
        var random = SplitMix64(seed: 42)
        // A small budget, so that stores evict.
        let cache = ResponseCache(maxBytes: 24 << 10, maxEntries: 40, shardCount: 2)
        let targets = (0..<30).map { "/screens/\($0)" }
        for step in 0..<3_000 {
            let target = targets[Int(random.next() % UInt64(targets.count))]
            let key = CacheKey(target: target, platform: "WEB")
            switch random.next() % 6 {
            case 0, 1, 2:
                var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
                metadata.variesByEncoding = true
                let length = 100 + Int(random.next() % 3_000)
                let coded: [CachedResponse.EncodedBody] =
                    random.next() % 2 == 0
                    ? [.init(coding: .gzip, body: ByteBuffer(repeating: 1, count: length / 4))] : []
                let entry = CachedResponse(
                    status: .ok,
                    headers: ["Content-Type": "application/json"],
                    body: ByteBuffer(repeating: 0, count: length),
                    metadata: metadata,
                    encodedBodies: coded
                )
                _ = cache.store(entry, for: key)
            case 3:
                guard case .fresh(let entry) = cache.lookup(key, requestHeaders: [:], now: .now()) else { break }
                let added = entry.adding([.init(coding: .br, body: ByteBuffer(repeating: 2, count: 50))])
                _ = cache.storeCompressed(added, replacing: entry, for: key)
            case 4:
                _ = cache.invalidate(CacheInvalidation(.targets([target]), soft: step % 2 == 0), now: .now())
            default:
                guard case .fresh(let entry) = cache.lookup(key, requestHeaders: [:], now: .now()) else { break }
                cache.remove(entry, storedFor: key)
            }
        }
        var expected: [String: Int] = ["identity": 0, "br": 0, "gzip": 0]
        var compressed = 0
        cache.forEachStoredResponse { entry in
            expected["identity", default: 0] += entry.bodyLength
            if !entry.encodedForms.isEmpty { compressed += 1 }
            for form in entry.encodedForms { expected[form.coding!.rawValue, default: 0] += form.bodyLength }
        }
        let statistics = cache.statistics
        #expect(statistics.bodyBytesByForm == expected)
        #expect(statistics.compressedEntries == compressed)
        #expect(statistics.evictions > 0 && statistics.entries > 0)
        _ = cache.invalidate(CacheInvalidation(.all), now: .now())
        #expect(cache.statistics.bodyBytesByForm == ["identity": 0, "br": 0, "gzip": 0])
    }
}
