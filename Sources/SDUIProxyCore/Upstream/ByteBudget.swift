import Synchronization

/// A limit on bytes held at once, shared by whoever holds them (every event loop's cache fills): each takes its
/// share before holding it and gives it back after. A reservation that does not fit is refused whole, so the
/// total never goes past the limit.
public final class ByteBudget: Sendable {
    /// The most bytes held at once.
    public let limit: Int
    private let held = Atomic<Int>(0)

    public init(limit: Int) {
        precondition(limit >= 0, "a byte budget cannot be negative")
        self.limit = limit
    }

    /// The bytes held now.
    public var inUse: Int { held.load(ordering: .relaxed) }

    /// Takes `count` bytes of the budget when they fit; false, and nothing taken, when they do not.
    public func reserve(_ count: Int) -> Bool {
        precondition(count >= 0, "a reservation cannot be negative")
        var current = held.load(ordering: .relaxed)
        while true {
            guard count <= limit - current else { return false }
            let (exchanged, original) = held.compareExchange(
                expected: current,
                desired: current + count,
                ordering: .relaxed
            )
            if exchanged { return true }
            current = original
        }
    }

    /// Gives back `count` bytes taken with ``reserve(_:)``.
    public func release(_ count: Int) {
        guard count > 0 else { return }
        let before = held.subtract(count, ordering: .relaxed).oldValue
        assert(before >= count, "released more of a byte budget than was reserved")
    }
}
