import Testing

@testable import SDUIProxyCore

/// Values filed by identifiers handed out in order, held to what a dictionary holds.
@Suite("A table of values by identifier")
struct IdentifierTableTests {
    @Test("identifiers in order, some removed and their slots reused, read back as a dictionary reads them")
    func inOrder() {
        var table = IdentifierTable<String>(capacity: 4)
        var expected: [Int: String] = [:]
        for key in 0..<40 {
            table[key] = "v\(key)"
            expected[key] = "v\(key)"
            // Every third one leaves: identifiers whose slots wrap around and collide stay reachable.
            if key % 3 == 0, key > 0 {
                #expect(table.remove(key - 2) == expected.removeValue(forKey: key - 2))
            }
        }
        #expect(table.count == expected.count)
        for key in 0..<45 { #expect(table[key] == expected[key], "\(key)") }
        #expect(table.remove(1_000) == nil)
        // A negative key is never held: free slots hold -1, and it must not find one.
        #expect(table[-1] == nil && table.slot(of: -1) == nil && table.remove(-1) == nil)
        table[-1] = nil
        #expect(table.count == expected.count)
    }

    @Test("random inserts, replacements and removals, many colliding, agree with a dictionary throughout")
    func randomOperations() {
        var random = SplitMix64(seed: 0x1D7A)
        var table = IdentifierTable<Int>()
        var expected: [Int: Int] = [:]
        for step in 0..<20_000 {
            // Keys from a small range, and a few far apart that land in the same slots.
            let key = random.next() % 4 == 0 ? Int(random.next() % 8) * 64 : Int(random.next() % 48)
            switch random.next() % 3 {
            case 0, 1:
                table[key] = step
                expected[key] = step
            default:
                #expect(table.remove(key) == expected.removeValue(forKey: key))
            }
            if step % 97 == 0 {
                #expect(table.count == expected.count)
                for probe in 0..<64 { #expect(table[probe] == expected[probe]) }
                for probe in stride(from: 0, to: 512, by: 64) { #expect(table[probe] == expected[probe]) }
            }
        }
    }

    @Test("a value is changed where it lies, through the slot that holds it")
    func changedInPlace() {
        var table = IdentifierTable<[Int]>()
        table[7] = [1]
        let slot = table.slot(of: 7)
        #expect(slot != nil)
        if let slot { table[slot: slot].append(2) }
        #expect(table[7] == [1, 2])
        #expect(table.slot(of: 8) == nil)
    }
}
