import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The tallies of one set of metrics, one a thread: a thread counts in its own (found through a thread-specific
/// slot, no lock another thread takes) and rendering adds them all up. ``RouteMetrics`` and
/// ``UpstreamDurationHistogram`` count this way.
///
/// A slot holds one thread's tally for one set of metrics at a time. When another set has taken it (two proxies
/// sharing an event loop group, or the metrics of a reloaded configuration), the thread finds the tally it made
/// before in the list rather than making one more each time the two take turns.
final class ThreadTallies<Tally: AnyObject & Sendable>: Sendable {
    /// A thread's tally, with the set it counts for: `@unchecked Sendable` only so that the slot holding it is; only
    /// its thread reads it.
    final class Current: @unchecked Sendable {
        let generation: UInt64
        let tally: Tally

        init(generation: UInt64, tally: Tally) {
            self.generation = generation
            self.tally = tally
        }
    }

    /// One slot for each kind of tally and the whole process, whatever the sets: a thread-specific key is a system
    /// resource, of which a process has about a thousand. The owner of the tallies keeps it in a static.
    private let slot: ThreadSpecificVariable<Current>
    private let made = Mutex<[Made]>([])
    /// Which set a slot's tally counts for: a number no other set has had, where an object's address may be
    /// reused once it is gone.
    private let generation = ThreadTallyGenerations.counter.wrappingAdd(1, ordering: .relaxed).newValue

    private struct Made: @unchecked Sendable {
        let thread: pthread_t
        let tally: Tally
    }

    init(slot: ThreadSpecificVariable<Current>) {
        self.slot = slot
    }

    /// The calling thread's tally, made by `make` the first time the thread counts in this set.
    func current(orMake make: () -> Tally) -> Tally {
        if let current = slot.currentValue, current.generation == generation { return current.tally }
        let thread = pthread_self()
        let tally = made.withLock { made in
            if let earlier = made.first(where: { pthread_equal($0.thread, thread) != 0 }) { return earlier.tally }
            let tally = make()
            made.append(Made(thread: thread, tally: tally))
            return tally
        }
        slot.currentValue = Current(generation: generation, tally: tally)
        return tally
    }

    /// Every thread's tally so far.
    var all: [Tally] { made.withLock { $0.map(\.tally) } }
}

/// The numbers ``ThreadTallies`` sets take, from one counter for them all (a generic class has no static of its own).
private enum ThreadTallyGenerations {
    static let counter = Atomic<UInt64>(0)
}
