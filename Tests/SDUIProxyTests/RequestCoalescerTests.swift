import NIOCore
import NIOPosix
import Testing

@testable import SDUIProxy

@Suite("The request coalescer: one leader per key, waiters on their own loops, a bounded wait")
struct RequestCoalescerTests {
    private struct Boom: Error, Equatable {}

    private let group = MultiThreadedEventLoopGroup.singleton

    @Test("the first caller leads; callers on other loops wait and get its outcome; the key is then free again")
    func leaderAndWaiters() async throws {
        let coalescer = RequestCoalescer<String, Int>(maximumWait: .seconds(10))
        #expect(coalescer.join(key: "k", on: group.next()) == nil)
        var waiters: [EventLoopFuture<Int>] = []
        for _ in 0..<10 {
            let loop = group.next()
            let waiter = try #require(coalescer.join(key: "k", on: loop))
            #expect(waiter.eventLoop === loop)
            waiters.append(waiter)
        }
        #expect(coalescer.inFlightCount == 1)
        #expect(coalescer.coalescedWaits == 10)
        // Other keys lead runs of their own.
        #expect(coalescer.join(key: "other", on: group.next()) == nil)
        #expect(coalescer.inFlightCount == 2)

        coalescer.finish(key: "k", with: .success(42))
        for waiter in waiters { #expect(try await waiter.get() == 42) }
        #expect(coalescer.inFlightCount == 1)

        // A later call for the same key leads again, and a failure reaches its waiters too.
        #expect(coalescer.join(key: "k", on: group.next()) == nil)
        let failed = try #require(coalescer.join(key: "k", on: group.next()))
        coalescer.finish(key: "k", with: .failure(Boom()))
        await #expect(throws: Boom.self) { try await failed.get() }
        coalescer.finish(key: "other", with: .success(1))
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("a waiter that waits longer than the maximum is told to go alone; the leader still finishes")
    func boundedWait() async throws {
        let coalescer = RequestCoalescer<String, Int>(maximumWait: .milliseconds(50))
        #expect(coalescer.join(key: "slow", on: group.next()) == nil)
        let waiter = try #require(coalescer.join(key: "slow", on: group.next()))

        await #expect(throws: RequestCoalescer<String, Int>.Failure.waitedTooLong) { try await waiter.get() }
        // The timed-out waiter left the run; the leader still ends it, and the key is free again.
        #expect(coalescer.inFlightCount == 1)
        coalescer.finish(key: "slow", with: .success(7))
        #expect(coalescer.inFlightCount == 0)
        #expect(coalescer.join(key: "slow", on: group.next()) == nil)
    }

    @Test("a maximum wait set later applies to the waiters that join after it")
    func changedWait() async throws {
        let coalescer = RequestCoalescer<String, Int>(maximumWait: .seconds(60))
        #expect(coalescer.join(key: "k", on: group.next()) == nil)
        coalescer.maximumWait = .milliseconds(50)
        let waiter = try #require(coalescer.join(key: "k", on: group.next()))
        await #expect(throws: RequestCoalescer<String, Int>.Failure.waitedTooLong) { try await waiter.get() }
        coalescer.finish(key: "k", with: .success(1))
        #expect(coalescer.maximumWait == .milliseconds(50))
    }
}
