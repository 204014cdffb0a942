import NIOCore
import ServiceLifecycle
import Synchronization

/// The warm-up of declared URLs as a `Service`: it starts once the listeners accept connections and stops
/// scheduling refreshes on graceful shutdown (or when the group is cancelled). A reload that declares other URLs
/// replaces the warm-up in force through ``WarmUps``.
final class WarmUpService: Service, Sendable, CustomStringConvertible {
    let warmUps: WarmUps
    private let whenListening: @Sendable () async throws -> Void

    /// - Parameter whenListening: returns once the listeners accept connections; throws when they cannot.
    init(warmUps: WarmUps, whenListening: @escaping @Sendable () async throws -> Void) {
        self.warmUps = warmUps
        self.whenListening = whenListening
    }

    var description: String { "WarmUpService" }

    func run() async throws {
        // A proxy that cannot listen has nothing to warm up: the failed listener ends the group.
        if (try? await whenListening()) != nil, !Task.isCancelled {
            warmUps.startCurrent()
        }
        // Returns only at the group's shutdown, however soon the warm-up finishes: a service that ends on its
        // own ends the group.
        try? await gracefulShutdown()
        warmUps.stopCurrent()
    }
}

/// The warm-up in force (a reload with new declared URLs starts another); `/ready` holds once one has been
/// ready (finished, or with `prefetch.readyWhen: succeeded` every URL fetched), so a reload never takes a warm
/// proxy out of rotation.
final class WarmUps: Sendable {
    private let state: Mutex<(current: WarmUp, anyReady: Bool, started: Bool, stopped: Bool)>

    init(_ first: WarmUp) {
        state = Mutex((first, false, false, false))
    }

    var current: WarmUp { state.withLock { $0.current } }

    /// Starts the warm-up in force; its end makes the proxy ready for good, when it did what `readyWhen` asks.
    func startCurrent() {
        let warmUp = state.withLock { state -> WarmUp? in
            guard !state.stopped else { return nil }
            state.started = true
            return state.current
        }
        guard let warmUp else { return }
        warmUp.start().whenComplete { _ in
            if warmUp.progress.isReady { self.state.withLock { $0.anyReady = true } }
        }
    }

    /// Stops the warm-up in force; none starts after this.
    func stopCurrent() {
        state.withLock { state -> WarmUp in
            state.stopped = true
            return state.current
        }.stop()
    }

    /// Stops the warm-up in force and puts `warmUp` in its place, started if the first one was.
    func replace(with warmUp: WarmUp) {
        let (old, starts) = state.withLock { state -> (WarmUp, Bool) in
            // The one replaced may have become ready since anyone asked.
            if state.current.progress.isReady { state.anyReady = true }
            defer { state.current = warmUp }
            return (state.current, state.started && !state.stopped)
        }
        old.stop()
        if starts { startCurrent() }
    }

    /// Progress of the warm-up in force, reported as finished and ready once any has been ready.
    var readiness: WarmUp.Progress {
        state.withLock { state in
            var progress = state.current.progress
            if progress.isReady { state.anyReady = true }
            if state.anyReady {
                progress.done = progress.total
                progress.isReady = true
            }
            return progress
        }
    }
}
