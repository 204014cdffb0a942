import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import SDUIProxy

@Suite("The request coalescer: one leader per key, waiters on their own loops, a bounded wait")
struct RequestCoalescerTests {
    /// Work that finishes only when the test says so, counting how often it was started.
    private final class HeldWork: Sendable {
        private let completions = NIOLockedValueBox<[RequestCoalescer<String, Int>.Completion]>([])

        var started: Int { completions.withLockedValue { $0.count } }

        func start(_ done: @escaping RequestCoalescer<String, Int>.Completion) {
            completions.withLockedValue { $0.append(done) }
        }

        func finish(with result: Result<Int, any Error>) {
            for done in completions.withLockedValue({ $0 }) { done(result) }
        }
    }

    private struct Boom: Error, Equatable {}

    private let group = MultiThreadedEventLoopGroup.singleton

    /// Starts held work for `key` as its leader; the leader's outcome arrives in the returned future.
    private func lead(
        _ key: String,
        in coalescer: RequestCoalescer<String, Int>
    ) -> (work: HeldWork, outcome: EventLoopFuture<Int>) {
        let work = HeldWork()
        let outcome = group.next().makePromise(of: Int.self)
        #expect(coalescer.run(key: key, on: group.next(), work: work.start) { outcome.completeWith($0) } == nil)
        return (work, outcome.futureResult)
    }

    @Test("the first caller leads; callers on other loops wait and get its outcome; the key is then free again")
    func leaderAndWaiters() async throws {
        let coalescer = RequestCoalescer<String, Int>(maximumWait: .seconds(10))
        let (work, leaderResult) = lead("k", in: coalescer)
        var waiters: [EventLoopFuture<Int>] = []
        for _ in 0..<10 {
            let loop = group.next()
            let waiter = try #require(
                coalescer.run(key: "k", on: loop, work: { _ in Issue.record("a waiter ran the work") }) { _ in
                    Issue.record("a waiter got the leader's completion")
                }
            )
            #expect(waiter.eventLoop === loop)
            waiters.append(waiter)
        }
        #expect(coalescer.inFlightCount == 1)
        #expect(coalescer.coalescedWaits == 10)

        work.finish(with: .success(42))
        #expect(try await leaderResult.get() == 42)
        for waiter in waiters { #expect(try await waiter.get() == 42) }
        #expect(work.started == 1)
        #expect(coalescer.inFlightCount == 0)

        // A later call for the same key leads again, and a failure reaches it too.
        let (again, failed) = lead("k", in: coalescer)
        again.finish(with: .failure(Boom()))
        await #expect(throws: Boom.self) { try await failed.get() }
    }

    @Test("a waiter that waits longer than the maximum is told to go alone; the leader still finishes")
    func boundedWait() async throws {
        let coalescer = RequestCoalescer<String, Int>(maximumWait: .milliseconds(50))
        let (work, leaderResult) = lead("slow", in: coalescer)
        let waiter = try #require(coalescer.run(key: "slow", on: group.next(), work: { _ in }) { _ in })

        await #expect(throws: RequestCoalescer<String, Int>.Failure.waitedTooLong) { try await waiter.get() }
        work.finish(with: .success(7))
        #expect(try await leaderResult.get() == 7)
        #expect(coalescer.inFlightCount == 0)
    }
}
