import NIOPosix
import Testing

@testable import SDUIProxy

/// Ids of requests and queued writes: 128 bits of the system's secure generator, drawn from the kernel a block at a
/// time per thread.
@Suite("secure random ids")
struct SecureRandomIDTests {
    private static func isHexID(_ id: String) -> Bool {
        id.utf8.count == 32 && id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    @Test("eight hex digits at once are the value's, lowest first, for every digit in every place")
    func hexDigits() {
        var values: [UInt32] = [0, .max, 0x0123_4567, 0x89AB_CDEF, 0xFEDC_BA98]
        // Each digit value in each place.
        for place in 0..<8 { for digit in 0..<16 { values.append(UInt32(digit) << (4 * place)) } }
        var random = SystemRandomNumberGenerator()
        for _ in 0..<1_000 { values.append(random.next()) }
        for value in values {
            let word = SecureRandomID.hexDigits(value).littleEndian
            let digits = withUnsafeBytes(of: word) { String(decoding: $0, as: UTF8.self) }
            let expected = String(
                String(String(value, radix: 16).reversed()).padding(toLength: 8, withPad: "0", startingAt: 0)
            )
            #expect(digits == expected, "\(value)")
        }
    }

    @Test("a block is drawn once for every sixteen ids, and each word is cleared as it is taken")
    func blockDraws() {
        let block = SecureRandomID.RandomBlock()
        #expect(block.draws == 0)
        #expect(block.takenWordsAreCleared)
        var words: [UInt64] = []
        for _ in 0..<(SecureRandomID.RandomBlock.wordCount / 2 * 3 + 1) {
            let (high, low) = block.next128()
            words += [high, low]
            #expect(block.takenWordsAreCleared)
        }
        #expect(block.draws == 4)
        #expect(Set(words).count == words.count)
    }

    @Test("ids across many draws are 32 lower-case hex digits, all different, each bit set about half the time")
    func idsAcrossDraws() {
        let count = 20_000
        let ids = (0..<count).map { _ in SecureRandomID.make() }
        #expect(ids.allSatisfy(Self.isHexID))
        #expect(Set(ids).count == count)
        // Each of the 128 bits is set in about half the ids (10,000 expected, a standard deviation of about 71):
        // a word left unfilled, or a draw's bytes used twice, would set some bit far less or far more often.
        var setCounts = [Int](repeating: 0, count: 128)
        for id in ids {
            for (position, character) in id.enumerated() {
                let value = Int(String(character), radix: 16)!
                for bit in 0..<4 where value & (1 << bit) != 0 { setCounts[position * 4 + bit] += 1 }
            }
        }
        #expect(setCounts.allSatisfy { (9_000...11_000).contains($0) }, "\(setCounts)")
    }

    @Test("threads draw blocks of their own: ids made at once on four threads are all different")
    func idsAcrossThreads() async throws {
        let pool = NIOThreadPool(numberOfThreads: 4)
        pool.start()
        let ids: [String]
        do {
            ids = try await withThrowingTaskGroup(of: [String].self) { group in
                for _ in 0..<4 {
                    group.addTask { try await pool.runIfActive { (0..<2_000).map { _ in SecureRandomID.make() } } }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
        } catch {
            try await pool.shutdownGracefully()
            throw error
        }
        try await pool.shutdownGracefully()
        #expect(ids.count == 8_000)
        #expect(Set(ids).count == 8_000)
    }
}
