import NIOConcurrencyHelpers

/// Holds a test origin's answers until the test opens it, so a test can act while a request is surely in flight
/// instead of betting that a delay outlasts its steps on a loaded machine.
final class OriginGate: Sendable {
    private enum State {
        case closed(waiting: [@Sendable () -> Void])
        case open
    }

    private let state = NIOLockedValueBox(State.closed(waiting: []))

    /// Lets every held answer go, and every later one through at once.
    func open() {
        let waiting = state.withLockedValue { state -> [@Sendable () -> Void] in
            defer { state = .open }
            guard case .closed(let waiting) = state else { return [] }
            return waiting
        }
        for answer in waiting { answer() }
    }

    /// Runs `answer` when the gate opens: now, if it is open already.
    func whenOpen(_ answer: @escaping @Sendable () -> Void) {
        let isOpen = state.withLockedValue { state -> Bool in
            guard case .closed(var waiting) = state else { return true }
            waiting.append(answer)
            state = .closed(waiting: waiting)
            return false
        }
        if isOpen { answer() }
    }
}
