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
    public let maximumWait: TimeAmount

    public init(maximumWait: TimeAmount) {
        self.maximumWait = maximumWait
    }

    /// How many callers joined an exchange that was already in flight, since start.
    public var coalescedWaits: Int { state.withLock { $0.coalescedWaits } }

    /// How many keys have work in flight.
    public var inFlightCount: Int { state.withLock { $0.inFlight.count } }

    /// How the outcome of a run is delivered.
    public typealias Completion = @Sendable (Result<Value, any Error>) -> Void

    /// Runs `work` for `key`, or joins the run already in flight.
    ///
    /// The leader's `work` is handed a completion to call with its outcome (on the leader's event loop): the
    /// outcome goes to every waiter, then to `leaderCompletion`. Callbacks rather than futures, because the
    /// leader is every plain cache miss and a future costs a promise and a callback allocation each.
    ///
    /// - Returns: nil when this caller leads the work; otherwise the leader's outcome, on `eventLoop`, or
    ///   ``Failure/waitedTooLong``.
    public func run(
        key: Key,
        on eventLoop: any EventLoop,
        work: (@escaping Completion) -> Void,
        leaderCompletion: @escaping Completion
    ) -> EventLoopFuture<Value>? {
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
        if let (id, promise) = joined {
            scheduleTimeout(for: id, key: key, promise: promise, on: eventLoop)
            return promise.futureResult
        }
        work { outcome in
            let waiters = self.state.withLock { state in state.inFlight.removeValue(forKey: key)?.waiters ?? [] }
            for waiter in waiters { waiter.promise.completeWith(outcome) }
            leaderCompletion(outcome)
        }
        return nil
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
