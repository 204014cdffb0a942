import NIOCore
import SDUIProxyCore
import Testing

@Suite("Marks on keys too large to hold")
struct OversizedResponseMarksTests {
    static let now = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func key(_ target: String) -> CacheKey {
        CacheKey(target: target, platform: "WEB", varyValues: [])
    }

    @Test("a mark holds for its lifetime, for its own key only")
    func lifetime() {
        let marks = OversizedResponseMarks(lifetime: .seconds(60))
        marks.mark(Self.key("/big"), now: Self.now)
        #expect(marks.isMarked(Self.key("/big"), now: Self.now + .seconds(59)))
        #expect(!marks.isMarked(Self.key("/small"), now: Self.now))
        #expect(!marks.isMarked(CacheKey(target: "/big", platform: "IOS", varyValues: []), now: Self.now))
        #expect(
            !marks.isMarked(Self.key("/big"), now: Self.now + .seconds(60)),
            "a resource that shrank is tried again"
        )
        #expect(marks.count == 0, "an expired mark is dropped when it is found")
        marks.mark(Self.key("/big"), now: Self.now + .seconds(61))
        #expect(marks.isMarked(Self.key("/big"), now: Self.now + .seconds(62)))
    }

    @Test("past its capacity the oldest marks go, and the rest stay")
    func capacity() {
        let marks = OversizedResponseMarks(lifetime: .seconds(60), capacity: 3)
        for index in 0..<5 { marks.mark(Self.key("/\(index)"), now: Self.now) }
        #expect(marks.count == 3)
        #expect(!marks.isMarked(Self.key("/0"), now: Self.now))
        #expect(!marks.isMarked(Self.key("/1"), now: Self.now))
        #expect((2..<5).allSatisfy { marks.isMarked(Self.key("/\($0)"), now: Self.now) })
        // Many more, with marks expiring and coming back: the count never passes the capacity.
        for round in 0..<200 { marks.mark(Self.key("/\(round % 7)"), now: Self.now + .seconds(Int64(round))) }
        #expect(marks.count <= 3)
    }
}
