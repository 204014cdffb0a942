import Testing

@testable import SDUIProxyCore

/// The hash the cache's side tables use (``ByteHash``): the same for the same bytes, every byte and bit counted,
/// whatever the length, and spread over a table's slots.
@Suite struct ByteHashTests {
    private func hash(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { ByteHash.hash($0) }
    }

    @Test("the same bytes hash the same wherever they lie, and as a string's UTF-8")
    func sameBytes() {
        for length in 0...40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            // A copy at another address, and the same bytes in the middle of a larger buffer.
            let padded = [0xAA, 0xBB, 0xCC] + bytes + [0xDD]
            let inside = padded.withUnsafeBytes {
                ByteHash.hash(UnsafeRawBufferPointer(rebasing: $0[3..<(3 + length)]))
            }
            #expect(hash(bytes) == hash(Array(bytes)))
            #expect(hash(bytes) == inside)
        }
        let target = "/screens/home?tab=2"
        #expect(ByteHash.hash(target) == hash(Array(target.utf8)))
    }

    @Test("every bit of every byte counts, at every length up to past five words")
    func everyBitCounts() {
        for length in 1...41 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 91 &+ 3) }
            let original = hash(bytes)
            var seen: Set<Int> = [original]
            for position in 0..<length {
                for bit in 0..<8 {
                    var flipped = bytes
                    flipped[position] ^= 1 << bit
                    let flippedHash = hash(flipped)
                    #expect(flippedHash != original, "length \(length), byte \(position), bit \(bit)")
                    seen.insert(flippedHash)
                }
            }
            // No two of the flips collide either.
            #expect(seen.count == length * 8 + 1, "length \(length)")
        }
    }

    @Test("lengths are told apart: a run of zero bytes hashes differently for each length")
    func lengthsCount() {
        let hashes = Set((0...64).map { hash([UInt8](repeating: 0, count: $0)) })
        #expect(hashes.count == 65)
    }

    @Test("two strings hash as a pair: the same pair the same, a byte moved between them or any byte changed not")
    func pairs() {
        let target = "/screens/home?tab=2"
        let variant = "IOS\u{0}pt-BR"
        let pair = ByteHash.hash(target, variant)
        #expect(ByteHash.hash(String(target), String(variant)) == pair)
        // Every split of the same bytes into two is a different pair.
        let joined = Array((target + variant).utf8)
        var splits: Set<Int> = []
        for cut in 0...joined.count {
            let first = String(decoding: joined[..<cut], as: UTF8.self)
            let second = String(decoding: joined[cut...], as: UTF8.self)
            splits.insert(ByteHash.hash(first, second))
        }
        #expect(splits.count == joined.count + 1)
        #expect(splits.contains(pair))
        // A changed byte on either side, and the two sides swapped.
        #expect(ByteHash.hash(target, "IOS\u{0}pt-BQ") != pair)
        #expect(ByteHash.hash("/screens/home?tab=3", variant) != pair)
        #expect(ByteHash.hash(variant, target) != pair)
    }

    @Test("similar targets spread evenly over a table's slots")
    func spread() {
        let slots = 1024
        var counts = [Int](repeating: 0, count: slots)
        var distinct: Set<Int> = []
        for number in 0..<10_000 {
            let value = ByteHash.hash("/screens/\(number)?platform=IOS")
            distinct.insert(value)
            counts[value & (slots - 1)] += 1
        }
        #expect(distinct.count == 10_000)
        // About ten a slot; a fair hash puts more than forty in one with a chance far below one in 10^15.
        #expect(counts.max()! <= 40)
        #expect(counts.filter { $0 == 0 }.count <= 10)
    }
}
