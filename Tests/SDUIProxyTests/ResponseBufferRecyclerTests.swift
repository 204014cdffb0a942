import NIOCore
import NIOPosix
import Testing

@testable import SDUIProxy

@Suite("Response buffers: one per event loop, reused once written")
struct ResponseBufferRecyclerTests {
    private static func storageAddress(_ buffer: ByteBuffer) -> UnsafeRawPointer? {
        buffer.withVeryUnsafeBytes { UnsafeRawPointer($0.baseAddress) }
    }

    @Test("a buffer nobody else holds is cleared and composed into again, not allocated")
    func reusesReleasedStorage() {
        let recycler = ResponseBufferRecycler()
        var first = recycler.buffer(minimumCapacity: 3000)
        first.writeString("HTTP/1.1 200 OK\r\n\r\nfirst")
        let address = Self.storageAddress(first)
        recycler.recycle(first)
        first = ByteBuffer()  // the channel has written it and let go

        var second = recycler.buffer(minimumCapacity: 3000)
        #expect(second.readableBytes == 0)
        #expect(Self.storageAddress(second) == address)
        second.writeString("second")
        #expect(second.getString(at: 0, length: 6) == "second")
    }

    @Test("a buffer the channel still holds keeps its bytes while the next response is composed")
    func neverOverwritesHeldBytes() {
        let recycler = ResponseBufferRecycler()
        var held = recycler.buffer(minimumCapacity: 64)
        held.writeString("the first response, not yet written")
        recycler.recycle(held)

        var next = recycler.buffer(minimumCapacity: 64)
        next.writeString("the second response")
        #expect(Self.storageAddress(next) != Self.storageAddress(held))
        #expect(String(buffer: held) == "the first response, not yet written")
        #expect(String(buffer: next) == "the second response")
    }

    @Test("a buffer grown past the limit is let go, and a small one grows to what a response needs")
    func boundsWhatItKeeps() {
        let recycler = ResponseBufferRecycler()
        var large = recycler.buffer(minimumCapacity: ResponseBufferRecycler.maximumRecycledCapacity + 1)
        large.writeString("large")
        recycler.recycle(large)
        large = ByteBuffer()
        // Kept, it would come back with its own capacity.
        let after = recycler.buffer(minimumCapacity: 16)
        #expect(after.capacity < ResponseBufferRecycler.maximumRecycledCapacity)

        recycler.recycle(after)
        let grown = recycler.buffer(minimumCapacity: 10_000)
        #expect(grown.capacity >= 10_000)
    }

    @Test("each loop of a group has its own value, found again on every call; a loop outside gets a new one")
    func onePerLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let outside = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let recyclers = PerEventLoop(group: group) { ResponseBufferRecycler() }
        let loops = Array(group.makeIterator())
        func identity(on loop: any EventLoop) async throws -> ObjectIdentifier {
            try await loop.submit { ObjectIdentifier(recyclers.value(on: loop)) }.get()
        }
        let firstLoop = try await identity(on: loops[0])
        #expect(try await identity(on: loops[0]) == firstLoop)
        #expect(try await identity(on: loops[1]) != firstLoop)
        let outsideLoop = outside.next()
        let outsideGetsNewOnes = try await outsideLoop.submit {
            let first = recyclers.value(on: outsideLoop)
            return recyclers.value(on: outsideLoop) !== first
        }.get()
        #expect(outsideGetsNewOnes)
        try await outside.shutdownGracefully()
        try await group.shutdownGracefully()
    }
}
