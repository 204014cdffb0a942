import Atomics

/// A value for each of up to ``count`` event loops, in a slot claimed by a loop the first time it asks and found
/// again by its identity among the claimed slots (the k-th loop to claim one compares k identities, two or three
/// on a proxy's usual few loops): state of each loop's own for a `NIOEventLoopMetricsDelegate`
/// (``BusyLoopYielding``), which is made before its group's loops exist and is called on every loop's thread after
/// every turn of it.
///
/// A thread-specific variable cost each turn about 110 instructions to read, and the class it held a retain and a
/// release more. A slot's owner is compared and claimed atomically, so loops claiming at once get slots apart.
///
/// `@unchecked Sendable`: the owners are reached only through `UnsafeAtomic`, and each value only by the thread of
/// the loop that claimed its slot.
final class EventLoopSlots<Value>: @unchecked Sendable {
    /// How many loops can hold a slot.
    let count: Int
    /// The identity of the loop that claimed each slot, zero while it is free. Only reached through `UnsafeAtomic`,
    /// which is what makes sharing the class across threads sound.
    private let owners: UnsafeMutablePointer<UnsafeAtomic<UInt>.Storage>
    /// Each slot's value.
    private let values: UnsafeMutablePointer<Value>

    /// `count` slots, each with `initial` as its value.
    init(count: Int, initial: Value) {
        precondition(count > 0, "no slots")
        self.count = count
        owners = UnsafeMutablePointer<UnsafeAtomic<UInt>.Storage>.allocate(capacity: count)
        owners.initialize(repeating: UnsafeAtomic<UInt>.Storage(0), count: count)
        values = UnsafeMutablePointer<Value>.allocate(capacity: count)
        values.initialize(repeating: initial, count: count)
    }

    deinit {
        owners.deinitialize(count: count)
        owners.deallocate()
        values.deinitialize(count: count)
        values.deallocate()
    }

    /// The value of the calling loop, which `loop` identifies, in its slot (claimed now if it has none); nil when
    /// others hold every slot. Only that loop's thread may read or change it.
    func value(of loop: ObjectIdentifier) -> UnsafeMutablePointer<Value>? {
        slot(of: loop).map { values + $0 }
    }

    /// The slot of the loop `loop` identifies, claimed now if it has none; nil when others hold every slot.
    func slot(of loop: ObjectIdentifier) -> Int? {
        let id = UInt(bitPattern: loop)
        for index in 0..<count {
            let owner = UnsafeAtomic<UInt>(at: owners + index)
            var current = owner.load(ordering: .relaxed)
            if current == 0 {
                // Free a moment ago: this loop's, unless another loop claimed it first.
                let claim = owner.compareExchange(expected: 0, desired: id, ordering: .relaxed)
                if claim.exchanged { return index }
                current = claim.original
            }
            if current == id { return index }
        }
        return nil
    }
}
