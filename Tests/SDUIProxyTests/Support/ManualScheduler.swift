import NIOConcurrencyHelpers
import NIOCore

@testable import SDUIProxy

/// A ``WarmUp/Scheduler`` that runs nothing by itself: a test sees what was scheduled, and for how long, and fires
/// it when it chooses, so no test waits on the wall clock for a retry.
final class ManualScheduler: Sendable {
    private struct Task {
        var id: Int
        var delay: TimeAmount
        var run: @Sendable () -> Void
    }

    private let state = NIOLockedValueBox<(next: Int, tasks: [Task])>((0, []))

    var scheduler: WarmUp.Scheduler {
        { delay, run in
            let id = self.state.withLockedValue { state -> Int in
                defer { state.next += 1 }
                state.tasks.append(Task(id: state.next, delay: delay, run: run))
                return state.next
            }
            return { self.state.withLockedValue { $0.tasks.removeAll { $0.id == id } } }
        }
    }

    /// The delays of the tasks waiting to run.
    var pendingDelays: [TimeAmount] { state.withLockedValue { $0.tasks.map(\.delay) } }

    /// Runs every task waiting now (not the ones they schedule).
    func fireAll() {
        let tasks = state.withLockedValue { state -> [Task] in
            defer { state.tasks.removeAll() }
            return state.tasks
        }
        for task in tasks { task.run() }
    }
}
