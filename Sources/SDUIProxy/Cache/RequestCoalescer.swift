import NIOCore
import Synchronization

/// Sends identical concurrent requests upstream once and fans the result out (the seed's deduplicator).
///
/// The first caller for a key becomes the leader and runs the work; callers that arrive while it runs wait
/// for its result on their own event loops. A waiter never waits longer than ``maximumWait``: after that it
/// is told to go alone (``Failure/waitedTooLong``), so a stuck upstream exchange cannot hold every client.
public final class RequestCoalescer<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    public enum Failure: Error, Equatable {
        /// The leader did not finish within the maximum wait.
        case waitedTooLong
    }

    private struct Waiter {
        let id: UInt64
        let promise: EventLoopPromise<Value>
    }

    private struct InFlight {
        var waiters: [Waiter] = []
    }

    private struct State {
        var inFlight: [Key: InFlight] = [:]
        var nextWaiterID: UInt64 = 0
        var coalescedWaits = 0
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

    /// How many keys have work in flight.
    public var inFlightCount: Int { state.withLock { $0.inFlight.count } }

    /// Leads the run for `key`, or joins the run already in flight.
    ///
    /// The leader runs the work itself and hands its outcome to ``finish(key:with:)``, which passes it to every
    /// waiter. No closure is handed over for the work: the leader is every plain cache miss, and a closure that
    /// captures what the work needs is an allocation each.
    ///
    /// - Returns: nil when this caller leads; otherwise the leader's outcome, on `eventLoop`, or
    ///   ``Failure/waitedTooLong``.
    public func join(key: Key, on eventLoop: any EventLoop) -> EventLoopFuture<Value>? {
        let joined = state.withLock { state -> (UInt64, EventLoopPromise<Value>)? in
            guard state.inFlight[key] != nil else {
                state.inFlight[key] = InFlight()
                return nil
            }
            let waiter = Waiter(id: state.nextWaiterID, promise: eventLoop.makePromise(of: Value.self))
            state.nextWaiterID &+= 1
            state.inFlight[key]!.waiters.append(waiter)
            state.coalescedWaits += 1
            return (waiter.id, waiter.promise)
        }
        guard let (id, promise) = joined else { return nil }
        scheduleTimeout(for: id, key: key, promise: promise, on: eventLoop)
        return promise.futureResult
    }

    /// Ends the run for `key` that the caller leads: every waiter gets `outcome`, on its own loop, and the next
    /// caller for `key` leads a new run.
    public func finish(key: Key, with outcome: Result<Value, any Error>) {
        let waiters = state.withLock { state in state.inFlight.removeValue(forKey: key)?.waiters ?? [] }
        for waiter in waiters { waiter.promise.completeWith(outcome) }
    }

    private func scheduleTimeout(
        for id: UInt64,
        key: Key,
        promise: EventLoopPromise<Value>,
        on eventLoop: any EventLoop
    ) {
        let timeout = eventLoop.scheduleTask(in: maximumWait) {
            let removed = self.state.withLock { state -> Bool in
                guard let index = state.inFlight[key]?.waiters.firstIndex(where: { $0.id == id }) else { return false }
                state.inFlight[key]!.waiters.remove(at: index)
                return true
            }
            if removed { promise.fail(Failure.waitedTooLong) }
        }
        promise.futureResult.whenComplete { _ in timeout.cancel() }
    }
}
