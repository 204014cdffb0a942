import NIOCore
import NIOPosix
import Testing

@testable import SDUIProxy
@testable import SDUIProxyCore

/// Each thread's scan storage: the fills on one event loop reuse one storage; another thread has its own.
@Suite("Each thread's component scan storage")
struct ThreadScanStorageTests {
    /// The room the kept members' array of this thread's storage had before a scan, its base address after, and
    /// how many targets the scan's plan has (checked by the test, not on the loop's thread).
    private static func keptArrayAroundScan() throws -> (roomBefore: Int, address: UInt, targets: Int) {
        let planner = PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])
        let body = ByteBuffer(
            string: #"{"_beagleComponent_":"beagle:button","onPress":[{"_beagleAction_":"beagle:pushView","#
                + #""route":{"url":"/next","shouldPrefetch":true}}]}"#
        )
        return try ThreadScanStorage.withStorage { storage throws(ComponentDecoder.Failure) in
            let roomBefore = storage.kept.capacity
            let plan = try ComponentDecoder().validateComponent(body, planningWith: planner, reusing: &storage)
            let address = UInt(bitPattern: storage.kept.withUnsafeBufferPointer { $0.baseAddress })
            return (roomBefore, address, plan.targets.count)
        }
    }

    @Test("scans on one thread reuse its storage's arrays; a scan on another thread uses its own")
    func oneStoragePerThread() throws {
        let loops = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? loops.syncShutdownGracefully() }
        let first = loops.next()
        var second = loops.next()
        if second === first { second = loops.next() }
        let firstScan = try first.submit { try Self.keptArrayAroundScan() }.wait()
        let secondScan = try first.submit { try Self.keptArrayAroundScan() }.wait()
        let otherThread = try second.submit { try Self.keptArrayAroundScan() }.wait()
        #expect([firstScan.targets, secondScan.targets, otherThread.targets] == [1, 1, 1])
        // A thread's first scan finds an empty storage; its next finds the room the first left.
        #expect(firstScan.roomBefore == 0)
        #expect(secondScan.roomBefore >= 16)
        #expect(secondScan.address == firstScan.address)
        // While the first thread's storage holds its array, no other allocation can have its address.
        #expect(otherThread.roomBefore == 0)
        #expect(otherThread.address != firstScan.address)
    }
}
