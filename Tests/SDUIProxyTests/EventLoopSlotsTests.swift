import NIOCore
import NIOEmbedded
import NIOPosix
import Testing

@testable import SDUIProxy

/// Slots claimed by event loops the first time they ask, for state of each loop's own.
@Suite("A slot for each event loop")
struct EventLoopSlotsTests {
    @Test("a loop claims a free slot the first time and finds the same one after; past the count there is none")
    func claimAndFind() {
        let loops = (0..<3).map { _ in EmbeddedEventLoop() }
        let slots = EventLoopSlots(count: 2, initial: 0)
        let first = slots.slot(of: ObjectIdentifier(loops[0]))
        let second = slots.slot(of: ObjectIdentifier(loops[1]))
        #expect(first == 0)
        #expect(second == 1)
        #expect(slots.slot(of: ObjectIdentifier(loops[0])) == first)
        #expect(slots.slot(of: ObjectIdentifier(loops[1])) == second)
        #expect(slots.slot(of: ObjectIdentifier(loops[2])) == nil)
        #expect(slots.slot(of: ObjectIdentifier(loops[1])) == second)
        // Each claimed slot holds a value of its own, changed where it lies.
        slots.value(of: ObjectIdentifier(loops[0]))?.pointee = 7
        #expect(slots.value(of: ObjectIdentifier(loops[0]))?.pointee == 7)
        #expect(slots.value(of: ObjectIdentifier(loops[1]))?.pointee == 0)
        #expect(slots.value(of: ObjectIdentifier(loops[2])) == nil)
    }

    @Test("the loops of a group claiming at once, each on its own thread, get slots apart")
    func claimsAtOnce() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 4)
        let slots = EventLoopSlots(count: 4, initial: 0)
        let loops = Array(group.makeIterator())
        let claimed = try await withThrowingTaskGroup(of: (Int?, Int?).self) { tasks in
            for loop in loops {
                tasks.addTask {
                    try await loop.submit {
                        // Claimed, then found again: the same slot.
                        (slots.slot(of: ObjectIdentifier(loop)), slots.slot(of: ObjectIdentifier(loop)))
                    }.get()
                }
            }
            return try await tasks.reduce(into: []) { $0.append($1) }
        }
        #expect(claimed.allSatisfy { $0.0 != nil && $0.0 == $0.1 })
        #expect(Set(claimed.compactMap(\.0)) == Set(0..<4))
        try await group.shutdownGracefully()
    }
}
