import NIOCore
import Synchronization

/// Sends identical concurrent requests upstream once and fans the result out (the seed's deduplicator).
///
/// The first caller for a key becomes the leader of a run and does the work; callers that arrive while it runs
/// wait for its result on their own event loops. A waiter never waits longer than ``maximumWait``: after that it
/// is told to go alone (``Failure/waitedTooLong``), so a stuck upstream exchange cannot hold every client.
///
/// A run may stop taking callers before it ends: each run keeps the stamp its leader started it with (the
/// cache's last invalidation number), and a caller joins only a run its `mayJoin` accepts. One it refuses (a purge
/// came since it started) is left to finish for the waiters it has, and the caller leads a new run for the key,
/// which later callers join.
///
/// A run names its leader (`Leader`: for the fetcher, the leading request's id and trace context), and each waiter
/// is told whom it waits for, so that what it logs and traces can say whose exchange answered it.
public final class RequestCoalescer<Key: Hashable & Sendable, Value: Sendable, Leader: Sendable>: Sendable {
    public enum Failure: Error, Equatable {
        /// The leader did not finish within the maximum wait.
        case waitedTooLong
    }

    /// A run, as its leader names it when it finishes.
    public struct Run: Hashable, Sendable {
        fileprivate let id: UInt64
        /// Where the run is filed while callers may join it: its end finds it by the key, with one lookup.
        fileprivate let key: Key
    }

    /// What a caller of ``join(key:stamp:leader:on:mayJoin:)`` does.
    public enum Role {
        /// It leads this run: it does the work and hands its outcome to ``finish(_:with:)``.
        case lead(Run)
        /// It waits for the leader's outcome (on its own event loop), or ``Failure/waitedTooLong``; `leader` is
        /// the one the run's leader gave.
        case wait(EventLoopFuture<Value>, leader: Leader)
    }

    private struct Waiter {
        let id: UInt64
        let promise: EventLoopPromise<Value>
    }

    private struct InFlight {
        let id: UInt64
        let stamp: UInt64
        let leader: Leader
        var waiters: [Waiter] = []
    }

    private enum Joined {
        case leads(UInt64)
        case waits(Waiter, run: UInt64, leader: Leader)
    }

    /// The runs in flight, filed by key while callers may join them: a plain miss leads a run and ends it with one
    /// lookup each (a table of runs by id beside a table of keys took six in all, each hashing the key or the id).
    private struct State {
        /// The run that callers for a key join.
        var joinable: [Key: InFlight] = [:]
        /// Runs that take no more callers (a purge came after they started), finishing for the waiters they have.
        var closed: [UInt64: InFlight] = [:]
        var nextID: UInt64 = 0
        var coalescedWaits = 0

        /// The run `id` for `key`, wherever it is filed, changed by `body`.
        mutating func withRun<Result>(
            _ id: UInt64,
            key: Key,
            _ body: (inout InFlight?) -> Result
        ) -> Result {
            if let index = joinable.index(forKey: key), joinable.values[index].id == id {
                var run: InFlight? = joinable.values[index]
                let result = body(&run)
                if let run { joinable.values[index] = run } else { joinable.remove(at: index) }
                return result
            }
            return body(&closed[id])
        }
    }

    private let state = Mutex(State())
    private let maximumWaitNanoseconds: Atomic<Int64>

    public init(maximumWait: TimeAmount) {
        maximumWaitNanoseconds = Atomic(maximumWait.nanoseconds)
    }

    /// The longest a waiter waits for a leader. A reload sets it (the coalescer and its runs in flight are
    /// kept); waiters that joined before keep the wait they were given.
    public var maximumWait: TimeAmount {
        get { .nanoseconds(maximumWaitNanoseconds.load(ordering: .relaxed)) }
        set { maximumWaitNanoseconds.store(newValue.nanoseconds, ordering: .relaxed) }
    }

    /// How many callers joined an exchange that was already in flight, since start.
    public var coalescedWaits: Int { state.withLock { $0.coalescedWaits } }

    /// How many runs are in flight, including those that take no more callers.
    public var inFlightCount: Int { state.withLock { $0.joinable.count + $0.closed.count } }

    /// Leads a run for `key`, or joins the one in flight.
    ///
    /// The leader does the work itself and hands its outcome to ``finish(_:with:)``, which passes it to every
    /// waiter. No closure is handed over for the work: the leader is every plain cache miss, and a closure that
    /// captures what the work needs is an allocation each.
    ///
    /// - Parameters:
    ///   - stamp: what a run this caller leads starts with (the cache's last invalidation number).
    ///   - leader: who the caller is, as the waiters of a run it leads are told; asked for only then.
    ///   - mayJoin: whether the caller may join a run that started with the stamp it is given; called under the
    ///     coalescer's lock, so it must not call the coalescer.
    public func join(
        key: Key,
        stamp: UInt64,
        leader: @autoclosure () -> Leader,
        on eventLoop: any EventLoop,
        mayJoin: (_ runStamp: UInt64) -> Bool = { _ in true }
    ) -> Role {
        let joined = state.withLock { state -> Joined in
            let id = state.nextID
            state.nextID &+= 1
            func newRun() -> InFlight { InFlight(id: id, stamp: stamp, leader: leader()) }
            // One lookup, which files a new run when there is none to join.
            var closing: InFlight?
            defer { if let closing { state.closed[closing.id] = closing } }
            return Self.join(
                &state.joinable[key, default: newRun()],
                as: id,
                closing: &closing,
                coalescedWaits: &state.coalescedWaits,
                newRun: newRun,
                on: eventLoop,
                mayJoin: mayJoin
            )
        }
        switch joined {
        case .leads(let id):
            return .lead(Run(id: id, key: key))
        case .waits(let waiter, let run, let leader):
            scheduleTimeout(for: waiter, in: run, key: key, on: eventLoop)
            return .wait(waiter.promise.futureResult, leader: leader)
        }
    }

    /// Ends `run`, which the caller leads: every waiter gets `outcome`, on its own loop, and the next caller for
    /// its key leads a new run (unless a newer run already takes them).
    public func finish(_ run: Run, with outcome: Result<Value, any Error>) {
        let waiters = state.withLock { state -> [Waiter] in
            state.withRun(run.id, key: run.key) { ended in
                defer { ended = nil }
                return ended?.waiters ?? []
            }
        }
        for waiter in waiters { waiter.promise.completeWith(outcome) }
    }

    /// Joins the run filed for the caller's key as a waiter, or leads it when the caller's lookup filed it (its id
    /// is `id`), or when the run there takes no more callers: that one is handed back in `closing`, to finish
    /// for the waiters it has.
    private static func join(
        _ run: inout InFlight,
        as id: UInt64,
        closing: inout InFlight?,
        coalescedWaits: inout Int,
        newRun: () -> InFlight,
        on eventLoop: any EventLoop,
        mayJoin: (_ runStamp: UInt64) -> Bool
    ) -> Joined {
        if run.id == id { return .leads(id) }
        guard mayJoin(run.stamp) else {
            closing = run
            run = newRun()
            return .leads(id)
        }
        // The waiter's id is the one the caller drew: ids are never reused, so it is as unique as a run's.
        let waiter = Waiter(id: id, promise: eventLoop.makePromise(of: Value.self))
        run.waiters.append(waiter)
        coalescedWaits += 1
        return .waits(waiter, run: run.id, leader: run.leader)
    }

    private func scheduleTimeout(for waiter: Waiter, in run: UInt64, key: Key, on eventLoop: any EventLoop) {
        let (id, promise) = (waiter.id, waiter.promise)
        let timeout = eventLoop.scheduleTask(in: maximumWait) {
            let removed = self.state.withLock { state -> Bool in
                state.withRun(run, key: key) { inFlight in
                    guard let index = inFlight?.waiters.firstIndex(where: { $0.id == id }) else { return false }
                    inFlight?.waiters.remove(at: index)
                    return true
                }
            }
            if removed { promise.fail(Failure.waitedTooLong) }
        }
        promise.futureResult.whenComplete { _ in timeout.cancel() }
    }
}
