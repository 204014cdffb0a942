import NIOCore
import Synchronization

/// Cache keys whose last fill was too large to hold (over `upstream.maxResponseBytes`, or past
/// `upstream.maxBufferedBytes`), so that their next misses are streamed at once instead of starting a fill that
/// would be cut off again: without it, every request for such a resource costs the backend an aborted request
/// before the one that is streamed. Varnish keeps "hit-for-miss" objects for the same reason.
///
/// A mark lasts ``lifetime``, so a resource that shrinks is cached again soon; at most ``capacity`` marks are kept,
/// the oldest going first. Taken on the miss path only, never on a hit.
public final class OversizedResponseMarks: Sendable {
    private struct State {
        var expiries: [CacheKey: NIODeadline] = [:]
        /// Insertion order, for dropping the oldest when full; may name keys already expired or re-marked.
        var order: [CacheKey] = []
    }

    /// How long a mark lasts.
    public let lifetime: TimeAmount
    /// The most keys marked at once.
    public let capacity: Int
    private let state = Mutex(State())

    public init(lifetime: TimeAmount = .seconds(60), capacity: Int = 1024) {
        precondition(capacity > 0, "room for at least one mark")
        self.lifetime = lifetime
        self.capacity = capacity
    }

    /// Whether `key`'s last fill, within ``lifetime`` of `now`, was too large to hold.
    public func isMarked(_ key: CacheKey, now: NIODeadline) -> Bool {
        state.withLock { state in
            guard let expiry = state.expiries[key] else { return false }
            if expiry > now { return true }
            state.expiries[key] = nil
            return false
        }
    }

    /// Marks `key` as too large to hold, from `now`.
    public func mark(_ key: CacheKey, now: NIODeadline) {
        state.withLock { state in
            if state.expiries.updateValue(now + lifetime, forKey: key) == nil { state.order.append(key) }
            // Past capacity, the oldest marks go (an entry in `order` whose key was dropped already is skipped).
            while state.expiries.count > capacity, !state.order.isEmpty {
                state.expiries[state.order.removeFirst()] = nil
            }
            if state.order.count > 2 * capacity { state.order.removeAll { state.expiries[$0] == nil } }
        }
    }

    /// The keys marked now, expired or not (for tests and metrics).
    public var count: Int { state.withLock { $0.expiries.count } }
}
