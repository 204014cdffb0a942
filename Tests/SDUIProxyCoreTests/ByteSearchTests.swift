import NIOCore
import SDUIProxyCore
import Testing

@Suite("Searching a body for bytes (does a component mention shouldPrefetch)")
struct ByteSearchTests {
    @Test("a body is scanned for the shouldPrefetch key, at any position")
    func scan() {
        let key = Array(#""shouldPrefetch""#.utf8)
        #expect(ByteSearch.contains(key, in: ByteBuffer(string: #"{"route":{"shouldPrefetch":true}}"#)))
        #expect(ByteSearch.contains(key, in: ByteBuffer(string: #""shouldPrefetch""#)))
        #expect(!ByteSearch.contains(key, in: ByteBuffer(string: #"{"route":{"shouldprefetch":true}}"#)))
        #expect(!ByteSearch.contains(key, in: ByteBuffer(string: #""shouldPrefetc"#)))
        #expect(!ByteSearch.contains(key, in: ByteBuffer()))
        #expect(!ByteSearch.contains(key, in: ByteBuffer(string: #"Prefetch "Prefetch""should"P"#)))
        #expect(ByteSearch.contains(key, in: ByteBuffer(string: #"PPPP"shouldPrefetch""#)))
        #expect(
            !ByteSearch.contains(key, in: ByteBuffer(string: #"PPPP"shouldPrefetch""#).getSlice(at: 0, length: 19)!)
        )
        #expect(!ByteSearch.contains([], in: ByteBuffer(string: "x")))
    }

    @Test("two runs of bytes are the same only with the same length and every byte alike, the last one too")
    func same() {
        func same(_ lhs: String, _ rhs: String) -> Bool {
            Array(lhs.utf8).withUnsafeBytes { lhs in Array(rhs.utf8).withUnsafeBytes { ByteSearch.same(lhs, $0) } }
        }
        #expect(same("Server: a\r\n", "Server: a\r\n"))
        #expect(!same("Server: a\r\n", "Server: b\r\n"))
        #expect(!same("Server: a\r\n", "Server: a\r\r"))
        #expect(!same("Server: a\r\n", "Server: a\r\n "))
        #expect(!same("", "x"))
        #expect(same("", ""))
    }

    @Test("the search agrees with a byte-by-byte search on random text, for needles with and without capitals")
    func scanAgreesWithNaiveSearch() {
        var random = SplitMix64(seed: 6)
        let alphabet = Array(#""shouldPrefetchP{}:,"#.utf8)
        func naive(_ needle: [UInt8], _ text: [UInt8]) -> Bool {
            guard !needle.isEmpty, text.count >= needle.count else { return false }
            return (0...(text.count - needle.count)).contains { text[$0..<($0 + needle.count)].elementsEqual(needle) }
        }
        for needle in [Array(#""shouldPrefetch""#.utf8), Array("Pre".utf8), Array("fet".utf8), Array("P".utf8)] {
            for _ in 0..<2_000 {
                let length = Int(random.next() % 64)
                var text = (0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
                if random.next() % 4 == 0, text.count >= needle.count {
                    let at = Int(random.next() % UInt64(text.count - needle.count + 1))
                    text.replaceSubrange(at..<(at + needle.count), with: needle)
                }
                // Behind other bytes, so the readable bytes do not start at the buffer's start.
                var buffer = ByteBuffer(string: "xyz")
                buffer.writeBytes(text)
                buffer.moveReaderIndex(forwardBy: 3)
                #expect(ByteSearch.contains(needle, in: buffer) == naive(needle, text))
            }
        }
    }
}
