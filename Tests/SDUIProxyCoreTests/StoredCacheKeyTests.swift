import Testing

@testable import SDUIProxyCore

@Suite("A key as the cache keeps it")
struct StoredCacheKeyTests {
    @Test("it gives back the key it was made from, and the same hash")
    func roundTrip() {
        let key = CacheKey(target: "/screens/home?tab=1&lang=pt-BR", platform: "ios", varyValues: ["de", ""])
        let stored = StoredCacheKey(key)
        #expect(stored.cacheKey == key)
        #expect(stored.cacheKey.hashCode == key.hashCode)
        #expect(stored.target == key.target)
        #expect(stored.cacheKey.variant == key.variant)
        #expect(stored.hashValue == key.hashValue)
        // A store files it by the hash it keeps, and finds it by the request's key's.
        #expect(stored.storeHash == key.storeHash)
        #expect(UInt32(stored.storeHash) == key.storedHash &>> 16 | key.storedHash &<< 16)
        #expect(stored.matches(key))
    }

    @Test("the keys of one shard, which share their hash's low bits, spread over a store's index")
    func storeHashSpreadsWithinShard() {
        // What a 32-shard cache puts in one shard: every hash ends in the same five bits.
        let keys = (0..<1_024).map { CacheKey(target: "/k\($0)", variant: "ios", hashCode: $0 << 16 | 0b10110) }
        let positions = Set(keys.map { StoredCacheKey($0).storeHash & 1023 })
        #expect(positions.count == 1_024)
    }

    @Test("it matches only its own target and variant, even under the same hash")
    func matchesOnlyItsOwn() {
        let key = CacheKey(target: "/screens/a", platform: "android")
        let stored = StoredCacheKey(key)
        #expect(!stored.matches(CacheKey(target: "/screens/b", platform: "android")))
        #expect(!stored.matches(CacheKey(target: "/screens/a", platform: "ios")))
        #expect(!stored.matches(key.selectingVariant("de")))
        // Keys that collide: same hash, other bytes.
        #expect(!stored.matches(CacheKey(target: "/screens/b", variant: "android", hashCode: key.hashCode)))
        #expect(!stored.matches(CacheKey(target: "/screens/a", variant: "androiD", hashCode: key.hashCode)))
        #expect(!stored.matches(CacheKey(target: "/screens/", variant: "aandroid", hashCode: key.hashCode)))
    }

    @Test("its target is compared and read where it keeps it, as purges do")
    func targetInPlace() {
        let stored = StoredCacheKey(CacheKey(target: "/screens/home?tab=1", platform: "ios"))
        #expect(stored.hasTarget("/screens/home?tab=1"))
        #expect(
            !stored.hasTarget("/screens/home?tab=2") && !stored.hasTarget("/screens/home") && !stored.hasTarget("ios")
        )
        #expect(stored.withTarget { PathPrefix("/screens").matches(bytes: $0) })
        #expect(stored.withTarget { PathPrefix("/screens/home").matches(bytes: $0) })
        #expect(!stored.withTarget { PathPrefix("/screens/ho").matches(bytes: $0) })
        #expect(!stored.withTarget { PathPrefix("/screens/home?tab=1&x").matches(bytes: $0) })
    }

    @Test("two made from equal keys are equal; from others, not")
    func equality() {
        let key = CacheKey(target: "/" + String(repeating: "x", count: 200), platform: "web")
        #expect(StoredCacheKey(key) == StoredCacheKey(key))
        #expect(StoredCacheKey(key) != StoredCacheKey(CacheKey(target: "/y", platform: "web")))
        let collision = CacheKey(target: "/y", variant: "web", hashCode: key.hashCode)
        #expect(StoredCacheKey(key) != StoredCacheKey(collision))
        #expect(StoredCacheKey(CacheKey(target: "", platform: "")).cacheKey == CacheKey(target: "", platform: ""))
    }

    @Test("a store keyed by them finds each by the key a request makes, and keeps colliding ones apart")
    func storeLookups() {
        var store = LRUStore<StoredCacheKey, Int>(costLimit: 1_000, countLimit: 10)
        let first = CacheKey(target: "/screens/one", platform: "ios")
        let twin = CacheKey(target: "/screens/two", variant: "ios", hashCode: first.hashCode)
        store.insert(1, forKey: StoredCacheKey(first), cost: 1)
        store.insert(2, forKey: StoredCacheKey(twin), cost: 1)
        #expect(store.peek(first) == 1)
        #expect(store.peek(twin) == 2)
        let found = store.value(forKey: twin)
        #expect(found == 2)
        let replaced = store.replaceValue(forKey: first, with: 3)
        #expect(replaced)
        let removed = store.removeValue(forKey: first)
        #expect(removed == 3)
        #expect(store.peek(first) == nil)
        #expect(store.peek(twin) == 2)
        #expect(store.count == 1)
    }
}
