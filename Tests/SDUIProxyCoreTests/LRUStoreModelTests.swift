import SDUIProxyCore
import Testing

/// The LRU store against a plain model of it (an array from most to least recently used), over long random
/// sequences of every operation, with keys whose hashes collide, so that probes run long, wrap around the end of
/// the store's index and are shifted back on removal.
@Suite("The LRU store against a model")
struct LRUStoreModelTests {
    /// A key whose hash is one of a few values: many keys share each, and each shares its lower bits with others.
    struct CollidingKey: LRUStoreKey, CustomStringConvertible {
        let number: Int
        static func == (lhs: CollidingKey, rhs: CollidingKey) -> Bool { lhs.number == rhs.number }
        func hash(into hasher: inout Hasher) { hasher.combine(number % 7) }
        var description: String { "k\(number)" }
    }

    /// What the store should hold: keys, values and costs, most recently used first.
    struct Model {
        var entries: [(key: Int, value: Int, cost: Int)] = []
        let costLimit: Int
        let countLimit: Int

        var totalCost: Int { entries.reduce(0) { $0 + $1.cost } }

        mutating func touch(_ key: Int) -> Int? {
            guard let position = entries.firstIndex(where: { $0.key == key }) else { return nil }
            let entry = entries.remove(at: position)
            entries.insert(entry, at: 0)
            return entry.value
        }

        mutating func insert(_ value: Int, key: Int, cost: Int) -> (stored: Bool, evicted: [Int]) {
            entries.removeAll { $0.key == key }
            guard cost <= costLimit else { return (false, []) }
            entries.insert((key, value, cost), at: 0)
            var evicted: [Int] = []
            while totalCost > costLimit || entries.count > countLimit {
                evicted.append(entries.removeLast().key)
            }
            return (true, evicted)
        }
    }

    @Test("random inserts, lookups and removals leave the store as the model", arguments: [1, 2, 3, 4, 5, 6, 7, 8])
    func randomSequences(seed: UInt64) async {
        var random = SplitMix64(seed: seed)
        var store = LRUStore<CollidingKey, Int>(costLimit: 400, countLimit: 40)
        var model = Model(costLimit: 400, countLimit: 40)
        for step in 0..<4_000 {
            if step % 200 == 0 { await CPUBoundTest.yieldToOtherTests() }
            let key = Int(random.next() % 90)
            switch random.next() % 10 {
            case 0, 1, 2, 3:
                let cost = Int(random.next() % 45)
                var evicted: [Int] = []
                let stored = store.insert(step, forKey: CollidingKey(number: key), cost: cost) { key, _ in
                    evicted.append(key.number)
                }
                let expected = model.insert(step, key: key, cost: cost)
                #expect(stored == expected.stored, "step \(step)")
                #expect(evicted == expected.evicted, "step \(step)")
            case 4, 5, 6:
                #expect(store.value(forKey: CollidingKey(number: key)) == model.touch(key), "step \(step)")
            case 7:
                let expected = model.entries.first { $0.key == key }?.value
                #expect(store.peek(CollidingKey(number: key)) == expected, "step \(step)")
            case 8:
                let expected = model.entries.first { $0.key == key }?.value
                model.entries.removeAll { $0.key == key }
                #expect(store.removeValue(forKey: CollidingKey(number: key)) == expected, "step \(step)")
            default:
                let remainder = Int(random.next() % 5)
                let expected = model.entries.filter { $0.key % 5 == remainder }.count
                model.entries.removeAll { $0.key % 5 == remainder }
                #expect(store.removeAll { key, _ in key.number % 5 == remainder } == expected, "step \(step)")
            }
            #expect(store.keysByRecency.map(\.number) == model.entries.map(\.key), "step \(step)")
            #expect(store.totalCost == model.totalCost && store.count == model.entries.count, "step \(step)")
        }
        // Every key the model holds is found, and no other.
        for key in 0..<90 {
            #expect(store.peek(CollidingKey(number: key)) == model.entries.first { $0.key == key }?.value)
        }
    }

    @Test("a store grows its index past many sizes and finds every key it holds")
    func growth() {
        var store = LRUStore<Int, Int>(costLimit: 1 << 30, countLimit: 20_000)
        for key in 0..<20_000 { store.insert(key * 2, forKey: key, cost: 1) }
        for key in stride(from: 0, to: 20_000, by: 3) { store.removeValue(forKey: key) }
        var found = 0
        for key in 0..<20_000 {
            let value = store.peek(key)
            #expect(value == (key % 3 == 0 ? nil : key * 2))
            if value != nil { found += 1 }
        }
        #expect(found == store.count && found == 20_000 - 6_667)
    }
}
