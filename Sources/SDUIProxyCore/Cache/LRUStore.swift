/// A least-recently-used map bounded by a total cost (bytes) and an entry count, with O(1) lookup, insert
/// and removal.
///
/// Nodes live in one array and link to each other by 32-bit index, so the store allocates only when it grows and
/// keeps no object per entry. They are found through ``NodeIndex``, an open-addressing table of node numbers with
/// a part of each key's hash: the key is held once, in its node. A `Dictionary` from key to node held every key a
/// second time in buckets of its own, two and a half per entry at its load factor, which came to more than a
/// hundred bytes of every cached response. Not thread-safe: ``ResponseCache`` holds one per shard behind a lock.
public struct LRUStore<Key: LRUStoreKey, Value> {
    /// Declared widest first, the links and cost in 32 bits: one per entry.
    private struct Node {
        var key: Key?
        var value: Value?
        var cost: UInt32
        var previous: UInt32
        var next: UInt32
    }

    private static var none: UInt32 { .max }

    /// What each entry's node takes in the node array, for the tests that hold it down.
    static var nodeStride: Int { MemoryLayout<Node>.stride }

    private var nodes: [Node] = []
    private var index = NodeIndex()
    private var freeList: [UInt32] = []
    /// Most recently used.
    private var head = LRUStore.none
    /// Least recently used: the next to go.
    private var tail = LRUStore.none

    /// The most total cost the store holds.
    public let costLimit: Int
    /// The most entries the store holds.
    public let countLimit: Int
    /// The sum of the costs of the entries held.
    public private(set) var totalCost = 0

    public init(costLimit: Int, countLimit: Int) {
        precondition(costLimit > 0 && countLimit > 0, "an LRU store needs room for at least one entry")
        self.costLimit = costLimit
        self.countLimit = min(countLimit, Int(UInt32.max - 1))
    }

    public var count: Int { index.count }

    /// The value for `key`, which becomes the most recently used.
    public mutating func value(forKey key: Key) -> Value? {
        value(hash: key.storeHash) { $0 == key }
    }

    /// The value of the key with `hash` that `matches`, which becomes the most recently used: for keys looked up
    /// by another type than they are kept as (a ``StoredCacheKey`` by its ``CacheKey``), whose hash is the same.
    public mutating func value(hash: Int, where matches: (Key) -> Bool) -> Value? {
        guard let node = find(hash: hash, where: matches) else { return nil }
        moveToFront(node)
        return nodes[Int(node)].value
    }

    /// The value for `key` without changing its recency.
    public func peek(_ key: Key) -> Value? {
        peek(hash: key.storeHash) { $0 == key }
    }

    /// The value of the key with `hash` that `matches`, without changing its recency.
    public func peek(hash: Int, where matches: (Key) -> Bool) -> Value? {
        find(hash: hash, where: matches).flatMap { nodes[Int($0)].value }
    }

    /// Stores `value` as the most recently used, replacing any value for `key`, then evicts least recently used
    /// entries until the limits hold. An entry whose cost alone exceeds the limit is not stored.
    ///
    /// - Returns: whether the value was stored, and the entries evicted to make room for it (a replaced value
    ///   for the same key is not counted as evicted).
    @discardableResult
    public mutating func insert(
        _ value: Value,
        forKey key: Key,
        cost: Int,
        evicted: (Key, Value) -> Void = { _, _ in }
    ) -> Bool {
        precondition(cost >= 0, "cost cannot be negative")
        let hash = key.storeHash
        guard cost <= costLimit, cost < Int(UInt32.max) else {
            _ = removeValue(forKey: key)
            return false
        }
        if let existing = find(hash: hash, where: { $0 == key }) {
            totalCost += cost - Int(nodes[Int(existing)].cost)
            nodes[Int(existing)].value = value
            nodes[Int(existing)].cost = UInt32(cost)
            moveToFront(existing)
        } else {
            let node = allocateNode(key: key, value: value, cost: UInt32(cost))
            index.insert(node, hash: hash)
            totalCost += cost
            linkAtFront(node)
        }
        while totalCost > costLimit || index.count > countLimit {
            let victim = tail
            guard victim != Self.none, let victimKey = nodes[Int(victim)].key else { break }
            let victimValue = nodes[Int(victim)].value!
            removeNode(victim, hash: victimKey.storeHash)
            evicted(victimKey, victimValue)
        }
        return true
    }

    /// Removes and returns the value for `key`.
    @discardableResult
    public mutating func removeValue(forKey key: Key) -> Value? {
        removeValue(hash: key.storeHash) { $0 == key }
    }

    /// Removes and returns the value of the key with `hash` that `matches`.
    @discardableResult
    public mutating func removeValue(hash: Int, where matches: (Key) -> Bool) -> Value? {
        guard let node = find(hash: hash, where: matches) else { return nil }
        let value = nodes[Int(node)].value
        removeNode(node, hash: hash)
        return value
    }

    /// Replaces the value stored for `key` in place, its cost and recency unchanged; false when none is stored.
    @discardableResult
    public mutating func replaceValue(forKey key: Key, with value: Value) -> Bool {
        replaceValue(hash: key.storeHash, where: { $0 == key }, with: value)
    }

    /// Replaces the value of the key with `hash` that `matches` in place, its cost and recency unchanged; false
    /// when none is stored.
    @discardableResult
    public mutating func replaceValue(hash: Int, where matches: (Key) -> Bool, with value: Value) -> Bool {
        guard let node = find(hash: hash, where: matches) else { return false }
        nodes[Int(node)].value = value
        return true
    }

    /// Removes every entry for which `shouldRemove` is true, and returns how many went. O(n).
    @discardableResult
    public mutating func removeAll(where shouldRemove: (Key, Value) -> Bool) -> Int {
        var doomed: [(UInt32, Int)] = []
        for node in nodes.indices {
            guard let key = nodes[node].key, let value = nodes[node].value, shouldRemove(key, value) else { continue }
            doomed.append((UInt32(node), key.storeHash))
        }
        for (node, hash) in doomed { removeNode(node, hash: hash) }
        return doomed.count
    }

    /// Calls `body` with every key and value, in no particular order, until it returns false. O(n).
    public func visit(_ body: (Key, Value) -> Bool) {
        for node in nodes.indices {
            guard let key = nodes[node].key, let value = nodes[node].value else { continue }
            if !body(key, value) { return }
        }
    }

    /// Calls `body` with every value, in no particular order. O(n).
    public func forEachValue(_ body: (Value) -> Void) {
        for node in nodes.indices { nodes[node].value.map(body) }
    }

    /// Replaces each value for which `replacement` gives a new one, keeping its cost and recency. O(n).
    public mutating func replaceValues(_ replacement: (Key, Value) -> Value?) {
        for node in nodes.indices {
            guard let key = nodes[node].key, let value = nodes[node].value, let new = replacement(key, value)
            else { continue }
            nodes[node].value = new
        }
    }

    /// The keys from most to least recently used (for tests and diagnostics).
    public var keysByRecency: [Key] {
        var keys: [Key] = []
        var node = head
        while node != Self.none {
            keys.append(nodes[Int(node)].key!)
            node = nodes[Int(node)].next
        }
        return keys
    }

    // MARK: Finding

    private func find(hash: Int, where matches: (Key) -> Bool) -> UInt32? {
        index.first(hash: hash) { node in nodes[Int(node)].key.map(matches) ?? false }
    }

    // MARK: Linking

    private mutating func allocateNode(key: Key, value: Value, cost: UInt32) -> UInt32 {
        let node = Node(key: key, value: value, cost: cost, previous: Self.none, next: Self.none)
        if let reused = freeList.popLast() {
            nodes[Int(reused)] = node
            return reused
        }
        nodes.append(node)
        return UInt32(nodes.count - 1)
    }

    private mutating func removeNode(_ node: UInt32, hash: Int) {
        unlink(node)
        index.remove(node, hash: hash)
        totalCost -= Int(nodes[Int(node)].cost)
        nodes[Int(node)] = Node(key: nil, value: nil, cost: 0, previous: Self.none, next: Self.none)
        freeList.append(node)
    }

    private mutating func moveToFront(_ node: UInt32) {
        guard head != node else { return }
        unlink(node)
        linkAtFront(node)
    }

    private mutating func linkAtFront(_ node: UInt32) {
        nodes[Int(node)].previous = Self.none
        nodes[Int(node)].next = head
        if head != Self.none { nodes[Int(head)].previous = node }
        head = node
        if tail == Self.none { tail = node }
    }

    private mutating func unlink(_ node: UInt32) {
        let previous = nodes[Int(node)].previous
        let next = nodes[Int(node)].next
        if previous != Self.none { nodes[Int(previous)].next = next } else { head = next }
        if next != Self.none { nodes[Int(next)].previous = previous } else { tail = previous }
        nodes[Int(node)].previous = Self.none
        nodes[Int(node)].next = Self.none
    }
}

/// A key an ``LRUStore`` can hold. Any `Hashable` type can be one, found by its `hashValue`; a key that carries a hash
/// of its own already (``StoredCacheKey``) gives that instead (``storeHash``).
public protocol LRUStoreKey: Hashable {
    /// The hash the store files the key by; only its lower 32 bits are used (``NodeIndex``).
    var storeHash: Int { get }
}

extension LRUStoreKey {
    public var storeHash: Int { hashValue }
}
