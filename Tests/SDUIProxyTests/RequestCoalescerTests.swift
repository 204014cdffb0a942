import NIOCore
import NIOPosix
import Testing

@testable import SDUIProxy

@Suite("The request coalescer: one leader per key, waiters on their own loops, a bounded wait")
struct RequestCoalescerTests {
    private struct Boom: Error, Equatable {}
    /// Runs name their leaders by a string here (the fetcher's name theirs by request id and span).
    private typealias Coalescer = RequestCoalescer<String, Int, String>

    private let group = MultiThreadedEventLoopGroup.singleton

    /// The run `role` leads; records an issue when it waits.
    private func leading(_ role: Coalescer.Role) -> Coalescer.Run? {
        guard case .lead(let run) = role else {
            Issue.record("expected to lead, but waits")
            return nil
        }
        return run
    }

    /// The outcome `role` waits for; records an issue when it leads.
    private func waiting(_ role: Coalescer.Role) -> EventLoopFuture<Int>? {
        guard case .wait(let future, _) = role else {
            Issue.record("expected to wait, but leads")
            return nil
        }
        return future
    }

    /// The leader `role` waits for; nil when it leads.
    private func leaderWaitedFor(_ role: Coalescer.Role) -> String? {
        guard case .wait(_, let leader) = role else { return nil }
        return leader
    }

    @Test("the first caller leads; callers on other loops wait and get its outcome; the key is then free again")
    func leaderAndWaiters() async throws {
        let coalescer = Coalescer(maximumWait: .seconds(10))
        let first = try #require(leading(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        var waiters: [EventLoopFuture<Int>] = []
        for _ in 0..<10 {
            let loop = group.next()
            let waiter = try #require(waiting(coalescer.join(key: "k", stamp: 0, leader: "caller", on: loop)))
            #expect(waiter.eventLoop === loop)
            waiters.append(waiter)
        }
        #expect(coalescer.inFlightCount == 1)
        #expect(coalescer.coalescedWaits == 10)
        // Other keys lead runs of their own.
        let other = try #require(leading(coalescer.join(key: "other", stamp: 0, leader: "caller", on: group.next())))
        #expect(coalescer.inFlightCount == 2)

        coalescer.finish(first, with: .success(42))
        for waiter in waiters { #expect(try await waiter.get() == 42) }
        #expect(coalescer.inFlightCount == 1)

        // A later call for the same key leads again, and a failure reaches its waiters too.
        let second = try #require(leading(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        #expect(second != first)
        let failed = try #require(waiting(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        coalescer.finish(second, with: .failure(Boom()))
        await #expect(throws: Boom.self) { try await failed.get() }
        coalescer.finish(other, with: .success(1))
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("a waiter is told the leader of the run it joined, which the leader named when it began the run")
    func waitersKnowTheirLeader() async throws {
        let coalescer = Coalescer(maximumWait: .hours(1))
        var asked = 0
        let run = try #require(
            leading(
                coalescer.join(
                    key: "k",
                    stamp: 0,
                    leader: {
                        asked += 1
                        return "first"
                    }(),
                    on: group.next()
                )
            )
        )
        let role = coalescer.join(
            key: "k",
            stamp: 0,
            leader: {
                asked += 1
                return "second"
            }(),
            on: group.next()
        )
        // Only a caller that leads is asked who it is.
        #expect(leaderWaitedFor(role) == "first")
        #expect(asked == 1)
        coalescer.finish(run, with: .success(1))
        #expect(try await waiting(role)?.get() == 1)
    }

    @Test("a run its callers may no longer join finishes for its own waiters while a new run takes the later ones")
    func refusedRun() async throws {
        // No wait runs out here: these are about which run a caller joins, not how long it waits.
        let coalescer = Coalescer(maximumWait: .hours(1))
        let old = try #require(leading(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next())))
        let early = try #require(waiting(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next())))
        // An invalidation came (the stamp is now 2): a run stamped 1 takes no one, so this caller leads anew.
        var asked: [UInt64] = []
        let new = try #require(
            leading(
                coalescer.join(key: "k", stamp: 2, leader: "caller", on: group.next()) { stamp in
                    asked.append(stamp)
                    return stamp >= 2
                }
            )
        )
        #expect(asked == [1])
        #expect(new != old)
        #expect(coalescer.inFlightCount == 2)
        // Later callers join the new run, which their rule accepts.
        let late = try #require(
            waiting(coalescer.join(key: "k", stamp: 2, leader: "caller", on: group.next()) { $0 >= 2 })
        )

        // The old run ends first: it answers its own waiter, and leaves the new run taking callers.
        coalescer.finish(old, with: .success(1))
        #expect(try await early.get() == 1)
        #expect(coalescer.inFlightCount == 1)
        let later = try #require(waiting(coalescer.join(key: "k", stamp: 2, leader: "caller", on: group.next())))
        coalescer.finish(new, with: .success(2))
        #expect(try await late.get() == 2)
        #expect(try await later.get() == 2)
        #expect(coalescer.inFlightCount == 0)
        #expect(coalescer.coalescedWaits == 3)
    }

    @Test("a refused run that ends after its successor does not free the key its successor holds")
    func refusedRunEndsLast() async throws {
        // No wait runs out here: these are about which run a caller joins, not how long it waits.
        let coalescer = Coalescer(maximumWait: .hours(1))
        let old = try #require(leading(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        let new = try #require(
            leading(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next()) { _ in false })
        )
        let third = try #require(
            leading(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next()) { _ in false })
        )
        coalescer.finish(new, with: .success(2))
        coalescer.finish(old, with: .success(1))
        // The third run still takes callers.
        let waiter = try #require(waiting(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next())))
        coalescer.finish(third, with: .success(3))
        #expect(try await waiter.get() == 3)
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("a waiter that waits longer than the maximum is told to go alone; the leader still finishes")
    func boundedWait() async throws {
        let coalescer = Coalescer(maximumWait: .milliseconds(50))
        let leader = try #require(leading(coalescer.join(key: "slow", stamp: 0, leader: "caller", on: group.next())))
        let waiter = try #require(waiting(coalescer.join(key: "slow", stamp: 0, leader: "caller", on: group.next())))

        await #expect(throws: Coalescer.Failure.waitedTooLong) { try await waiter.get() }
        // The timed-out waiter left the run; the leader still ends it, and the key is free again.
        #expect(coalescer.inFlightCount == 1)
        coalescer.finish(leader, with: .success(7))
        #expect(coalescer.inFlightCount == 0)
        #expect(leading(coalescer.join(key: "slow", stamp: 0, leader: "caller", on: group.next())) != nil)
    }

    @Test("a waiter of a run that takes no more callers still leaves it when its wait runs out")
    func boundedWaitOnClosedRun() async throws {
        let coalescer = Coalescer(maximumWait: .milliseconds(50))
        let old = try #require(leading(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        let waiter = try #require(waiting(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        // The old run is closed to callers by the next one, with its waiter still in it.
        let new = try #require(
            leading(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next()) { _ in false })
        )

        await #expect(throws: Coalescer.Failure.waitedTooLong) { try await waiter.get() }
        #expect(coalescer.inFlightCount == 2)
        coalescer.finish(old, with: .success(1))
        #expect(coalescer.inFlightCount == 1)
        // The new run still takes callers, and ending it frees the key.
        let late = try #require(waiting(coalescer.join(key: "k", stamp: 1, leader: "caller", on: group.next())))
        coalescer.finish(new, with: .success(2))
        #expect(try await late.get() == 2)
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("a maximum wait set later applies to the waiters that join after it")
    func changedWait() async throws {
        let coalescer = Coalescer(maximumWait: .seconds(60))
        let leader = try #require(leading(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        coalescer.maximumWait = .milliseconds(50)
        let waiter = try #require(waiting(coalescer.join(key: "k", stamp: 0, leader: "caller", on: group.next())))
        await #expect(throws: Coalescer.Failure.waitedTooLong) { try await waiter.get() }
        coalescer.finish(leader, with: .success(1))
        #expect(coalescer.maximumWait == .milliseconds(50))
    }
}
