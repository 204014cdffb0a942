import SDUIProxyCore
import Testing

@Suite("An HTTP/2 flow-control window given back as it is taken")
struct HTTP2InboundWindowTests {
    @Test("nothing is given back below half the window; at half, all that was taken, and the count starts again")
    func halfAWindow() {
        var window = HTTP2InboundWindow(size: 65_535)
        #expect(window.took(16_384) == nil)
        #expect(window.took(16_382) == nil, "32,766 taken: under half of 65,535")
        #expect(window.takenSinceUpdate == 32_766)
        #expect(window.took(1) == 32_767)
        #expect(window.takenSinceUpdate == 0)
        #expect(window.took(40_000) == 40_000, "one large frame gives back at once")
        #expect(window.took(0) == nil, "an empty frame costs no update")
    }

    @Test("what is given back never exceeds what was taken, whatever the frames")
    func neverMoreThanTaken() {
        var generator = SplitMix64(seed: 0x4854_5450_3257)
        for _ in 0..<200 {
            var window = HTTP2InboundWindow(size: Int(generator.next() % 100_000) + 1)
            var taken = 0
            var given = 0
            for _ in 0..<100 {
                let bytes = Int(generator.next() % 20_000)
                taken += bytes
                given += window.took(bytes) ?? 0
                #expect(given <= taken)
                #expect(taken - given < max(window.size / 2, 1), "never more than half a window held back")
            }
        }
    }

    @Test("the connection's window is filled again once half of it is spent, and only then")
    func refill() {
        let window = HTTP2InboundWindow(size: 65_535)
        #expect(window.refill(left: 65_535) == nil)
        #expect(window.refill(left: 32_768) == nil)
        #expect(window.refill(left: 32_767) == 32_768)
        #expect(window.refill(left: 0) == 65_535)
    }
}
