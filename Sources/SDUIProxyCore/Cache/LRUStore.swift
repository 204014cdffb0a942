/// A least-recently-used map bounded by a total cost (bytes) and an entry count, with O(1) lookup, insert
/// and removal.
///
/// Nodes live in one array and link to each other by index, so the store allocates only when it grows and
/// keeps no object per entry. Not thread-safe: ``ResponseCache`` holds one per shard behind a lock.
public struct LRUStore<Key: Hashable, Value> {
    private struct Node {
        var key: Key?
        var value: Value?
        var cost: Int
        var previous: Int
        var next: Int
    }

    private static var none: Int { -1 }

    private var nodes: [Node] = []
    private var indexByKey: [Key: Int] = [:]
    private var freeList: [Int] = []
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
        self.countLimit = countLimit
    }

    public var count: Int { indexByKey.count }

    /// The value for `key`, which becomes the most recently used.
    public mutating func value(forKey key: Key) -> Value? {
        guard let index = indexByKey[key] else { return nil }
        moveToFront(index)
        return nodes[index].value
    }

    /// The value for `key` without changing its recency.
    public func peek(_ key: Key) -> Value? {
        indexByKey[key].flatMap { nodes[$0].value }
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
        if let existing = indexByKey[key] {
            totalCost += cost - nodes[existing].cost
            nodes[existing].value = value
            nodes[existing].cost = cost
            moveToFront(existing)
        } else {
            guard cost <= costLimit else { return false }
            let index = allocateNode(key: key, value: value, cost: cost)
            indexByKey[key] = index
            totalCost += cost
            linkAtFront(index)
        }
        if cost > costLimit {
            _ = removeValue(forKey: key)
            return false
        }
        while totalCost > costLimit || indexByKey.count > countLimit {
            let victim = tail
            guard victim != Self.none, let victimKey = nodes[victim].key else { break }
            let victimValue = nodes[victim].value!
            removeNode(at: victim, key: victimKey)
            evicted(victimKey, victimValue)
        }
        return true
    }

    /// Removes and returns the value for `key`.
    @discardableResult
    public mutating func removeValue(forKey key: Key) -> Value? {
        guard let index = indexByKey[key] else { return nil }
        let value = nodes[index].value
        removeNode(at: index, key: key)
        return value
    }

    /// Replaces the value stored for `key` in place, its cost and recency unchanged; false when none is stored.
    @discardableResult
    public mutating func replaceValue(forKey key: Key, with value: Value) -> Bool {
        guard let index = indexByKey[key] else { return false }
        nodes[index].value = value
        return true
    }

    /// Removes every entry for which `shouldRemove` is true, and returns how many went. O(n).
    @discardableResult
    public mutating func removeAll(where shouldRemove: (Key, Value) -> Bool) -> Int {
        var doomed: [(Key, Int)] = []
        for (key, index) in indexByKey where shouldRemove(key, nodes[index].value!) {
            doomed.append((key, index))
        }
        for (key, index) in doomed { removeNode(at: index, key: key) }
        return doomed.count
    }

    /// Calls `body` with every value, in no particular order. O(n).
    public func forEachValue(_ body: (Value) -> Void) {
        for index in indexByKey.values { nodes[index].value.map(body) }
    }

    /// Replaces each value for which `replacement` gives a new one, keeping its cost and recency. O(n).
    public mutating func replaceValues(_ replacement: (Key, Value) -> Value?) {
        for index in nodes.indices {
            guard let key = nodes[index].key, let value = nodes[index].value, let new = replacement(key, value)
            else { continue }
            nodes[index].value = new
        }
    }

    /// The keys from most to least recently used (for tests and diagnostics).
    public var keysByRecency: [Key] {
        var keys: [Key] = []
        var index = head
        while index != Self.none {
            keys.append(nodes[index].key!)
            index = nodes[index].next
        }
        return keys
    }

    // MARK: Linking

    private mutating func allocateNode(key: Key, value: Value, cost: Int) -> Int {
        let node = Node(key: key, value: value, cost: cost, previous: Self.none, next: Self.none)
        if let reused = freeList.popLast() {
            nodes[reused] = node
            return reused
        }
        nodes.append(node)
        return nodes.count - 1
    }

    private mutating func removeNode(at index: Int, key: Key) {
        unlink(index)
        indexByKey.removeValue(forKey: key)
        totalCost -= nodes[index].cost
        nodes[index] = Node(key: nil, value: nil, cost: 0, previous: Self.none, next: Self.none)
        freeList.append(index)
    }

    private mutating func moveToFront(_ index: Int) {
        guard head != index else { return }
        unlink(index)
        linkAtFront(index)
    }

    private mutating func linkAtFront(_ index: Int) {
        nodes[index].previous = Self.none
        nodes[index].next = head
        if head != Self.none { nodes[head].previous = index }
        head = index
        if tail == Self.none { tail = index }
    }

    private mutating func unlink(_ index: Int) {
        let previous = nodes[index].previous
        let next = nodes[index].next
        if previous != Self.none { nodes[previous].next = next } else { head = next }
        if next != Self.none { nodes[next].previous = previous } else { tail = previous }
        nodes[index].previous = Self.none
        nodes[index].next = Self.none
    }
}
