import NIOCore
import SDUIProxyCore
import Testing

@Suite("ContentHash")
struct ContentHashTests {
    @Test("the hash depends on the bytes only, not on where they sit in a buffer")
    func layoutIndependent() {
        let bytes = Array("{\"_beagleComponent_\":\"beagle:text\",\"text\":\"hello\"}".utf8)
        var shifted = ByteBuffer(bytes: [0, 1, 2] + bytes)
        shifted.moveReaderIndex(forwardBy: 3)
        #expect(ContentHash.hash64(shifted) == ContentHash.hash64(ByteBuffer(bytes: bytes)))
    }

    @Test("every single-bit change and every length gives another hash")
    func sensitive() {
        let base = (0..<100).map { UInt8($0 * 7 % 251) }
        var seen: Set<UInt64> = [ContentHash.hash64(ByteBuffer(bytes: base))]
        for index in base.indices {
            for bit in 0..<8 {
                var changed = base
                changed[index] ^= 1 << bit
                seen.insert(ContentHash.hash64(ByteBuffer(bytes: changed)))
            }
        }
        #expect(seen.count == 1 + base.count * 8)

        let lengths = Set((0...64).map { ContentHash.hash64(ByteBuffer(bytes: [UInt8](repeating: 0, count: $0))) })
        #expect(lengths.count == 65)
    }

    @Test("values are pinned: replicas and restarts must agree on validators")
    func pinned() {
        #expect(ContentHash.hex(ContentHash.hash64(ByteBuffer(string: ""))).count == 16)
        #expect(ContentHash.entityTag(for: ByteBuffer(string: "hello")) == "\"\(pinnedHello)-5\"")
    }

    @Test("hex digits and entity tags are spelled as String(radix: 16) spells them, zero-padded to 16")
    func spelling() {
        var random = SplitMix64(seed: 0xE7A6)
        let hashes: [UInt64] = [0, 1, 0xF, 0x10, .max, 1 << 63] + (0..<200).map { _ in random.next() }
        let lengths =
            [0, 1, 15, 16, 255, 256, 4095, 4096, 1 << 20, Int.max] + (0..<200).map { _ in Int(random.next() >> 40) }
        for (hash, length) in zip(hashes, lengths) {
            let digits = String(hash, radix: 16)
            let padded = String(repeating: "0", count: 16 - digits.count) + digits
            #expect(ContentHash.hex(hash) == padded)
            #expect(ContentHash.entityTag(hash: hash, length: length) == "\"\(padded)-\(String(length, radix: 16))\"")
        }
    }

    /// What the algorithm described on ``ContentHash`` gives for "hello"; a change here changes every entity
    /// tag a deployed proxy has handed out.
    private let pinnedHello = "c31d5902a79947f3"
}
