import Synchronization

/// Wakes one waiting delivery worker: a signal sent while nobody waits is kept, so the next wait returns at
/// once and no enqueue is missed between a worker's look at the store and its wait.
final class WakeSignal: Sendable {
    private struct State {
        var signaled = false
        var waiter: (token: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextToken: UInt64 = 0
    }

    private let state = Mutex(State())

    init() {}

    /// Whether a worker waits on this signal now: it has looked at the store and found nothing to do yet.
    var hasWaiter: Bool { state.withLock { $0.waiter != nil } }

    /// Wakes the waiter, or the next one to wait.
    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.signaled = true
                return nil
            }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }

    /// Returns when signalled, after `timeout`, or when the task is cancelled, whichever comes first.
    func wait(upTo timeout: Duration) async {
        if consumeSignal() || timeout <= .zero || Task.isCancelled { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Returns when signalled or when the task is cancelled.
    func wait() async {
        if consumeSignal() || Task.isCancelled { return }
        await waitForSignal()
    }

    private func consumeSignal() -> Bool {
        state.withLock { state in
            defer { state.signaled = false }
            return state.signaled
        }
    }

    private func waitForSignal() async {
        let token = state.withLock { state -> UInt64 in
            state.nextToken += 1
            return state.nextToken
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.signaled || Task.isCancelled {
                        state.signaled = false
                        return true
                    }
                    // One waiter at a time: a worker waits on its own signal.
                    let previous = state.waiter
                    state.waiter = (token, continuation)
                    if let previous { previous.continuation.resume() }
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let waiter = state.waiter, waiter.token == token else { return nil }
                state.waiter = nil
                return waiter.continuation
            }
            waiter?.resume()
        }
    }
}
