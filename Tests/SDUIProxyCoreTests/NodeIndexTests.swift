import Testing

@testable import SDUIProxyCore

/// The LRU store's index on its own, with hashes chosen to fill the last slots of the table and wrap around its
/// end, where deletion's shifting back has its second case.
@Suite struct NodeIndexTests {
    /// The node numbers found for `hash` among `nodes`, by their hashes.
    private static func find(_ hash: Int, in index: NodeIndex, hashes: [UInt32: Int]) -> [UInt32] {
        var seen: [UInt32] = []
        _ = index.first(hash: hash) { node in
            if hashes[node] == hash { seen.append(node) }
            return false
        }
        return seen
    }

    @Test("probes that wrap around the end of the table find every node after any removal")
    func wrapping() {
        // Eight slots hold up to six nodes; every hash's home is slot 6 or 7, so the run wraps to slots 0 to 3.
        let hashes: [UInt32: Int] = [0: 6, 1: 7, 2: 6, 3: 7, 4: 6, 5: 14]
        for removed in hashes.keys.sorted() {
            var index = NodeIndex()
            for node in hashes.keys.sorted() { index.insert(node, hash: hashes[node]!) }
            #expect(index.count == 6)
            index.remove(removed, hash: hashes[removed]!)
            #expect(index.count == 5)
            for (node, hash) in hashes {
                let found = Self.find(hash, in: index, hashes: hashes)
                #expect(found.contains(node) == (node != removed), "node \(node) after removing \(removed)")
            }
        }
    }

    @Test("removing every node in turn, from a table that wrapped, leaves it empty and still consistent")
    func drain() {
        let hashes: [UInt32: Int] = [0: 7, 1: 7, 2: 6, 3: 0, 4: 7, 5: 1]
        var index = NodeIndex()
        for node in hashes.keys.sorted() { index.insert(node, hash: hashes[node]!) }
        var left = Set(hashes.keys)
        for node in [2, 0, 5, 4, 1, 3] as [UInt32] {
            index.remove(node, hash: hashes[node]!)
            left.remove(node)
            for (other, hash) in hashes {
                #expect(Self.find(hash, in: index, hashes: hashes).contains(other) == left.contains(other))
            }
        }
        #expect(index.count == 0)
    }
}
