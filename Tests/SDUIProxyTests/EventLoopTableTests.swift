import NIOCore
import NIOEmbedded
import NIOPosix
import Testing

@testable import SDUIProxy

@Suite("EventLoopTable: one value per loop of a group, found by the loop's identity")
struct EventLoopTableTests {
    @Test("each loop of groups of one to nine loops finds the value made for it; a loop outside finds none")
    func findsEachLoopsValue() throws {
        for size in 1...9 {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: size)
            defer { try? group.syncShutdownGracefully() }
            let loops = Array(group.makeIterator())
            var made = 0
            // Each value names the loop it was made for, and the order it was made in.
            let table = EventLoopTable(group: group) { eventLoop -> (loop: ObjectIdentifier, order: Int) in
                made += 1
                return (ObjectIdentifier(eventLoop), made)
            }
            #expect(made == size)
            var orders: Set<Int> = []
            for loop in loops {
                let value = try #require(table[loop], "a loop of a group of \(size) has no value")
                #expect(value.loop == ObjectIdentifier(loop))
                orders.insert(value.order)
            }
            #expect(orders == Set(1...size))
            #expect(table.allValues.count == size)
            #expect(table[EmbeddedEventLoop()] == nil)
        }
    }

    @Test("a value that cannot be made fails the table with its error")
    func failureToMakeAValue() {
        struct Refused: Error {}
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? group.syncShutdownGracefully() }
        #expect(throws: Refused.self) {
            try EventLoopTable(group: group) { _ throws(Refused) -> Int in throw Refused() }
        }
    }
}
