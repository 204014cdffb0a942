import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("The LRU store and the sharded response cache")
struct CacheStoreTests {
    @Test("least recently used entries go first when the cost limit is reached")
    func costLimit() {
        var store = LRUStore<String, Int>(costLimit: 100, countLimit: 10)
        store.insert(1, forKey: "a", cost: 40)
        store.insert(2, forKey: "b", cost: 40)
        _ = store.value(forKey: "a")
        var evicted: [String] = []
        store.insert(3, forKey: "c", cost: 40) { key, _ in evicted.append(key) }
        #expect(evicted == ["b"])
        #expect(store.keysByRecency == ["c", "a"])
        #expect(store.totalCost == 80)
    }

    @Test("the count limit holds too")
    func countLimit() {
        var store = LRUStore<Int, Int>(costLimit: 1_000_000, countLimit: 3)
        for key in 0..<10 { store.insert(key, forKey: key, cost: 1) }
        #expect(store.count == 3)
        #expect(store.keysByRecency == [9, 8, 7])
    }

    @Test("replacing a value updates its cost, and an oversized entry is refused")
    func replaceAndOversize() {
        var store = LRUStore<String, Int>(costLimit: 100, countLimit: 10)
        store.insert(1, forKey: "a", cost: 10)
        store.insert(2, forKey: "a", cost: 30)
        #expect(store.totalCost == 30)
        #expect(store.peek("a") == 2)
        let storedBig = store.insert(3, forKey: "big", cost: 101)
        #expect(!storedBig)
        #expect(store.peek("big") == nil)
        let storedHuge = store.insert(4, forKey: "a", cost: 500)
        #expect(!storedHuge)
        #expect(store.peek("a") == nil)
        #expect(store.totalCost == 0)
    }

    @Test("removal and slot reuse keep the list consistent")
    func removal() {
        var store = LRUStore<Int, Int>(costLimit: 1000, countLimit: 100)
        for key in 0..<20 { store.insert(key, forKey: key, cost: 5) }
        let removedOne = store.removeValue(forKey: 5)
        let removedEven = store.removeAll { key, _ in key % 2 == 0 }
        #expect(removedOne == 5)
        #expect(removedEven == 10)
        for key in 100..<105 { store.insert(key, forKey: key, cost: 5) }
        #expect(store.count == 14)
        #expect(store.keysByRecency.first == 104)
        #expect(store.totalCost == 70)
        #expect(Set(store.keysByRecency).count == store.count)
    }

    private static func entry(
        _ body: String,
        lifetime: Int64 = 60,
        initialAge: Int64 = 0,
        storedAt: NIODeadline = .now()
    )
        -> CachedResponse
    {
        CachedResponse(
            status: .ok,
            headers: ["Content-Type": "application/json"],
            body: ByteBuffer(string: body),
            metadata: .init(storedAt: storedAt, initialAge: initialAge, freshnessLifetime: lifetime)
        )
    }

    @Test("a server error without Vary does not replace a target's variants; a success without Vary does")
    func errorOverVariants() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let key = CacheKey(target: "/a", platform: "WEB")
        var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        metadata.varyNames = ["accept-language"]
        metadata.variant = "en"
        let english = CachedResponse(
            status: .ok,
            headers: ["Vary": "Accept-Language"],
            body: ByteBuffer(string: "{}"),
            metadata: metadata
        )
        #expect(cache.store(english, for: key))
        let plain = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 30)
        let error = CachedResponse(
            status: .serviceUnavailable,
            headers: [:],
            body: ByteBuffer(string: "down"),
            metadata: plain
        )
        #expect(!cache.store(error, for: key))
        if case .fresh(let found) = cache.lookup(key, requestHeaders: ["Accept-Language": "en"], now: .now()) {
            #expect(found.status == .ok)
        } else {
            Issue.record("the English variant is still there")
        }
        let unvaried = CachedResponse(status: .ok, headers: [:], body: ByteBuffer(string: "{}"), metadata: plain)
        #expect(cache.store(unvaried, for: key))
        if case .fresh(let found) = cache.lookup(key, requestHeaders: ["Accept-Language": "fr"], now: .now()) {
            #expect(found.varyNames.isEmpty)
        } else {
            Issue.record("a success that no longer varies replaces the list")
        }
    }

    @Test("lookups report fresh, stale and missing entries, and count hits and misses")
    func lookups() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let key = CacheKey(target: "/a", platform: "WEB")
        if case .miss = cache.lookup(key, requestHeaders: [:], now: .now()) {} else { Issue.record("expected a miss") }
        cache.store(Self.entry("{}", lifetime: 10), for: key)
        if case .fresh = cache.lookup(key, requestHeaders: [:], now: .now()) {
        } else {
            Issue.record("expected a fresh entry")
        }
        if case .stale = cache.lookup(key, requestHeaders: [:], now: .now() + .seconds(11)) {
        } else {
            Issue.record("expected stale")
        }
        let statistics = cache.statistics
        #expect(statistics.hits == 1)
        #expect(statistics.misses == 1)
        #expect(statistics.entries == 1)
    }

    @Test("a miss is a vary-miss while another platform or variant of the target is stored, else a uri-miss")
    func varyMissAcrossPlatforms() {
        // One shard's budget holds two entries: a third evicts the least recently used.
        let cache = ResponseCache(maxBytes: 2 * Self.entry("{}").byteCost, maxEntries: 100, shardCount: 1)
        let ios = CacheKey(target: "/a", platform: "IOS")
        let android = CacheKey(target: "/a", platform: "ANDROID")
        let french = CacheKey(target: "/a", platform: "IOS", varyValues: ["fr"])
        func isVaryMiss(_ key: CacheKey) -> Bool? {
            switch cache.lookup(key, requestHeaders: [:], now: .now()) {
            case .miss: false
            case .varyMiss: true
            case .fresh, .stale: nil
            }
        }
        #expect(isVaryMiss(android) == false)
        cache.store(Self.entry("{}"), for: ios)
        #expect(isVaryMiss(android) == true)
        #expect(isVaryMiss(french) == true)
        #expect(isVaryMiss(CacheKey(target: "/b", platform: "IOS")) == false)
        // Replacing the stored response counts it once: removing it leaves nothing.
        cache.store(Self.entry("{}"), for: ios)
        cache.invalidate(CacheInvalidation(.targets(["/a"])), now: .now())
        #expect(isVaryMiss(android) == false)
        // Evicted, it no longer makes the target's misses vary-misses.
        cache.store(Self.entry("{}"), for: ios)
        cache.store(Self.entry("{}"), for: CacheKey(target: "/b", platform: "IOS"))
        cache.store(Self.entry("{}"), for: CacheKey(target: "/c", platform: "IOS"))
        #expect(isVaryMiss(ios) == false)
        #expect(isVaryMiss(CacheKey(target: "/b", platform: "WEB")) == true)
        // A stale response that is dropped goes from the count too.
        let dropped = Self.entry("{}")
        cache.store(dropped, for: CacheKey(target: "/d", platform: "IOS"))
        cache.remove(dropped, storedFor: CacheKey(target: "/d", platform: "IOS"))
        #expect(isVaryMiss(CacheKey(target: "/d", platform: "WEB")) == false)
    }

    @Test("age counts the initial age and the time resident")
    func age() {
        let stored = NIODeadline.now()
        let response = Self.entry("{}", lifetime: 100, initialAge: 30, storedAt: stored)
        #expect(response.ageSeconds(at: stored + .seconds(5)) == 35)
        #expect(response.isFresh(at: stored + .seconds(69)))
        #expect(!response.isFresh(at: stored + .seconds(70)))
    }

    @Test("keys differ by platform and vary values, and equal keys hash alike")
    func keys() {
        let web = CacheKey(target: "/a", platform: "WEB")
        #expect(web == CacheKey(target: "/a", platform: "WEB"))
        #expect(web.hashCode == CacheKey(target: "/a", platform: "WEB").hashCode)
        #expect(web != CacheKey(target: "/a", platform: "IOS"))
        #expect(
            CacheKey(target: "/a", platform: "WEB", varyValues: ["en"])
                != CacheKey(target: "/a", platform: "WEB", varyValues: ["pt"])
        )
        #expect(web.platform == "WEB")
    }

    @Test("a key's platform is its variant up to the first vary value, whatever the platform's characters")
    func platformOfKey() {
        #expect(CacheKey(target: "/a", platform: "ANDROID", varyValues: ["en", "dark"]).platform == "ANDROID")
        #expect(CacheKey(target: "/a", platform: "IOS").selectingVariant("pt").platform == "IOS")
        #expect(CacheKey(target: "/a", platform: "").platform == "")
        // A combining mark after the first byte: a byte scan must not split or drop it.
        #expect(CacheKey(target: "/a", platform: "tv\u{301}", varyValues: ["x"]).platform == "tv\u{301}")
    }

    @Test("many threads at once keep the budget and lose nothing")
    func concurrentUse() async {
        let cache = ResponseCache(maxBytes: 64 << 20, maxEntries: 1000, shardCount: 8)
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    for index in 0..<2000 {
                        let key = CacheKey(target: "/\((index * 7 + worker) % 1500)", platform: "WEB")
                        if case .miss = cache.lookup(key, requestHeaders: [:], now: .now()) {
                            cache.store(Self.entry(String(repeating: "x", count: 100)), for: key)
                        }
                    }
                }
            }
        }
        let statistics = cache.statistics
        #expect(statistics.entries <= 1000)
        #expect(statistics.hits + statistics.misses == 16000)
        #expect(statistics.bytes <= 64 << 20)
        // Two workers may both miss and store the same key; the second store replaces the first.
        #expect(statistics.stores - statistics.evictions >= statistics.entries)
        #expect(statistics.entries == 1000)
    }
}

@Suite("How an entry keeps its bytes")
struct CachedResponseStorageTests {
    private func entry(_ body: ByteBuffer) -> CachedResponse {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        return CachedResponse(
            status: .ok,
            headers: headers,
            body: body,
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
    }

    @Test(
        "the stored head drops framing and Age, keeps the rest in order, and ends with one ETag, the backend's or its own"
    )
    func storedHead() {
        let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:text"}"#)
        func head(_ entry: CachedResponse) -> String { String(decoding: entry.encodedHead(), as: UTF8.self) }
        func stored(_ headers: [(String, String)]) -> CachedResponse {
            var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
            metadata.tagHeader = "surrogate-key"
            return CachedResponse(status: .ok, headers: HTTPHeaders(headers), body: body, metadata: metadata)
        }

        let tagged = stored([
            ("Content-Type", "application/json"), ("Content-Length", "999"), ("ETag", #""v1""#),
            ("Age", "30"), ("Last-Modified", "Sun, 22 Nov 2026 03:00:00 GMT"), ("Surrogate-Key", "home, screens all"),
            ("ETag", #""ignored""#),
        ])
        #expect(
            head(tagged)
                == "Content-Type: application/json\r\nSurrogate-Key: home, screens all\r\n"
                + "Last-Modified: Sun, 22 Nov 2026 03:00:00 GMT\r\n"
                + "ETag: \"v1\"\r\nVia: 1.1 sdui-proxy\r\nContent-Length: \(body.readableBytes)\r\n"
        )
        #expect(!tagged.headers.contains(name: "content-length") && !tagged.headers.contains(name: "age"))
        #expect(tagged.headers.count == 5)
        #expect(tagged.headers["Via"] == ["1.1 sdui-proxy"])
        #expect(tagged.etag == #""v1""# && tagged.upstreamETag == #""v1""#)
        #expect(tagged.lastModified == "Sun, 22 Nov 2026 03:00:00 GMT")
        #expect(tagged.tags == ["home", "screens", "all"])

        let plain = stored([("content-type", "application/json")])
        #expect(plain.upstreamETag == nil && plain.lastModified == nil && plain.tags.isEmpty)
        #expect(plain.headers.first(name: "etag") == plain.etag)
        #expect(
            head(plain)
                == "content-type: application/json\r\nETag: \(plain.etag)\r\nVia: 1.1 sdui-proxy\r\n"
                + "Content-Length: \(body.readableBytes)\r\n"
        )
    }

    @Test("past a response's 64th field the stored head still keeps what it shares and drops framing and Age")
    func storedHeadPastSixtyFourFields() {
        let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:text"}"#)
        var headers: [(String, String)] = (0..<70).map { ("X-Field-\($0)", "value \($0)") }
        // The two it drops, one each side of the 64th field, and one it keeps past it.
        headers.insert(("Age", "12"), at: 10)
        headers.insert(("Content-Length", "999"), at: 66)
        headers.insert(("Cache-Control", "max-age=60"), at: 68)
        let entry = CachedResponse(
            status: .ok,
            headers: HTTPHeaders(headers),
            body: body,
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
        let kept = entry.headers
        #expect(kept.filter { $0.name.hasPrefix("X-Field-") }.map(\.value) == (0..<70).map { "value \($0)" })
        #expect(kept["Cache-Control"] == ["max-age=60"])
        #expect(kept["Age"].isEmpty)
        #expect(kept["Content-Length"].isEmpty)
        #expect(
            String(decoding: entry.encodedHead(), as: UTF8.self)
                .hasSuffix("Content-Length: \(body.readableBytes)\r\n")
        )
    }

    @Test("an entry's headers, read back from its stored head, are the headers it kept, names and values alike")
    func headersReadBack() {
        let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:text"}"#)
        let kept: [(String, String)] = [
            ("Content-Type", "application/json; charset=utf-8"), ("X-Colons", "a: b:c :"), ("x-empty", ""),
            ("Surrogate-Key", "a b"), ("Date", "Sun, 22 Nov 2026 03:00:00 GMT"), ("surrogate-key", "c,d\te"),
            ("Vary", "Accept-Language, Beagle-Platform"), ("X-Long", String(repeating: "v", count: 2000)),
        ]
        let headers = kept + [("Content-Length", "5"), ("Age", "3")]
        let entry = CachedResponse(
            status: .notFound,
            headers: HTTPHeaders(headers),
            body: body,
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
        let readBack = entry.headers.map { [$0.name, $0.value] }
        // The date, a value of the response's own, follows the lines other responses may share.
        let date = kept.filter { $0.0 == "Date" }
        let common = kept.filter { $0.0 != "Date" }
        #expect(
            readBack == (common + date + [("ETag", entry.etag), ("Via", "1.1 sdui-proxy")]).map { [$0.0, $0.1] }
        )
        #expect(entry.tags == ["a", "b", "c", "d", "e"])
        #expect(entry.status == .notFound)
    }

    @Test("an entry that did not hash its body up front gives the same content hash when asked")
    func contentHashOnDemand() {
        let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:text","text":"on demand"}"#)
        func stored(computing: Bool, headers: [(String, String)]) -> CachedResponse {
            var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
            metadata.computesContentHash = computing
            return CachedResponse(status: .ok, headers: HTTPHeaders(headers), body: body, metadata: metadata)
        }
        let upfront = stored(computing: true, headers: [("ETag", #""backend""#)])
        let onDemand = stored(computing: false, headers: [("ETag", #""backend""#)])
        #expect(onDemand.contentHash == upfront.contentHash)
        #expect(onDemand.hasContentHash(upfront.contentHash))
        #expect(!onDemand.hasContentHash(String(repeating: "0", count: 16)))
        #expect(onDemand.etag == #""backend""#)
        // Without the backend's ETag the entry needs the hash for its own, whatever it was asked.
        let ownTag = stored(computing: false, headers: [])
        #expect(ownTag.etag == ContentHash.entityTag(hash: ContentHash.hash64(body), length: body.readableBytes))
        #expect(ownTag.contentHash == upfront.contentHash)
    }

    @Test("a beagle-hash is matched as the 16 lower-case hex digits the entry sends, without formatting it")
    func contentHashMatching() {
        let stored = entry(ByteBuffer(string: #"{"_beagleComponent_":"beagle:text"}"#))
        let hash = stored.contentHash
        #expect(hash.utf8.count == 16)
        #expect(stored.hasContentHash(hash))
        #expect(!stored.hasContentHash(hash.uppercased()) || hash == hash.uppercased())
        #expect(!stored.hasContentHash(String(hash.dropLast()) + (hash.last == "0" ? "1" : "0")))
        #expect(!stored.hasContentHash(String(hash.dropLast())))
        #expect(!stored.hasContentHash(hash + "0"))
        #expect(!stored.hasContentHash("zz" + hash.dropFirst(2)))
        #expect(!stored.hasContentHash(""))
    }

    @Test("a small body read as a slice of a larger buffer is kept as exactly its bytes")
    func smallBodyExact() {
        var read = ByteBufferAllocator().buffer(capacity: 64 << 10)
        read.writeString("HTTP/1.1 200 OK\r\n\r\n")
        read.writeString(#"{"_beagleComponent_":"beagle:text","text":"hi"}"#)
        let body = read.getSlice(at: 19, length: read.readableBytes - 19) ?? ByteBuffer()
        #expect(body.readableBytes == 47)
        let stored = entry(body)
        guard case .exact(let bytes) = stored.identity.storedBody else {
            Issue.record("a small body is kept in a buffer")
            return
        }
        #expect(Array(bytes) == Array(body.readableBytesView))
        // One array holds the stored lines and the body, and no more.
        let storage = stored.identity.storedLines.withUnsafeBufferPointer { $0.baseAddress }
        let bodyStorage = bytes.withUnsafeBufferPointer { $0.baseAddress }
        #expect(bodyStorage == storage.map { $0 + stored.identity.storedLines.count })
        #expect(stored.encodedHead().starts(with: Array("Content-Type: ".utf8)))
        #expect(stored.bodyLength == body.readableBytes)
        #expect(stored.body == body)
        #expect(
            stored.byteCost == body.readableBytes + stored.identity.storedLines.count + MemoryLayout<StoredForm>.size
                + stored.commonLines.byteCost + CachedResponse.bookkeepingBytes
        )
    }

    @Test("the encoded bytes are handed over where the entry keeps them: the head, then an exact body, or no body")
    func encodedBytesInPlace() {
        let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:text","text":"hi"}"#)
        let small = entry(body)
        let headStorage = small.identity.storedLines.withUnsafeBufferPointer { $0.baseAddress }
        var handed: (head: [UInt8], body: [UInt8]?, sameStorage: Bool) = ([], nil, false)
        small.identity.withEncodedBytes { head, exactBody in
            handed = (Array(head), exactBody.map(Array.init), head.baseAddress == UnsafeRawPointer(headStorage))
        }
        #expect(handed.head == Array(small.identity.storedLines))
        // What a hit writes around them: the entry's common lines before, this hop's `Via` and the length after.
        #expect(
            small.encodedHead()
                == small.commonLines.lines + handed.head
                + Array("Via: 1.1 sdui-proxy\r\nContent-Length: \(body.readableBytes)\r\n".utf8)
        )
        #expect(small.encodedHead().count == small.identity.encodedHeadCount(common: small.commonLines))
        #expect(handed.body == Array(body.readableBytesView))
        #expect(handed.sameStorage)

        let large = entry(ByteBuffer(repeating: UInt8(ascii: "x"), count: CachedResponse.maximumExactBodyBytes + 1))
        var largeHandsBody = true
        large.identity.withEncodedBytes { head, exactBody in
            largeHandsBody = exactBody != nil
            #expect(Array(head) == Array(large.identity.storedLines))
        }
        #expect(!largeHandsBody)
    }

    @Test("a body over the limit stays in its buffer")
    func largeBodyBuffer() {
        let body = ByteBuffer(repeating: UInt8(ascii: "x"), count: CachedResponse.maximumExactBodyBytes + 1)
        guard case .buffer(let kept) = entry(body).identity.storedBody else {
            Issue.record("a large body is copied")
            return
        }
        #expect(kept == body)
    }

    @Test("a large body read into a much larger buffer is stored without the spare capacity")
    func largeBodyWithoutSpareCapacity() {
        let length = CachedResponse.maximumExactBodyBytes + 1
        var read = ByteBufferAllocator().buffer(capacity: 1 << 20)
        read.writeRepeatingByte(UInt8(ascii: "x"), count: length)
        let stored = entry(read)
        guard case .buffer(let kept) = stored.identity.storedBody else {
            Issue.record("a large body is kept as bytes")
            return
        }
        #expect(kept == read)
        #expect(kept.capacity < 2 * length)
        #expect(read.capacity >= 1 << 20)
    }
}
