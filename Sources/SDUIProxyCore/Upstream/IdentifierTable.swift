/// Values filed by non-negative integer identifiers handed out in order, as a pool hands out its connections' (or
/// well-mixed hashes): an open-addressing table whose slot is the identifier's low bits, probed linearly, that
/// deletes without leaving tombstones.
///
/// Every exchange finds its connection two or three times (to lease it, to find its handler, to release it); a
/// `Dictionary` ran SipHash over the identifier for each, about 200 instructions. While the identifiers held lie
/// within a window of the table's size (a pool's live connections, handed out in order), each has a slot of its
/// own and a lookup is one comparison; well-mixed hashes (the targets a loop found fresh lately) collide as often
/// as in any open-addressing table. At most half the slots are used: the table doubles before that.
///
/// Generic and used across modules (``UpstreamPoolStateMachine`` here; the pool's handlers and the recently fresh
/// targets in `SDUIProxy`): its methods are inlinable, so that each use is specialized for its values instead of
/// running through their metadata.
public struct IdentifierTable<Value> {
    /// Each slot's identifier, -1 when the slot is free.
    @usableFromInline var keys: [Int]
    /// Each slot's value, nil when the slot is free.
    @usableFromInline var values: [Value?]
    /// The table's size less one: the size is a power of two.
    @usableFromInline var mask: Int
    /// How many identifiers are held.
    @usableFromInline var held = 0

    /// How many identifiers are held.
    public var count: Int { held }

    /// A table with room for `capacity` identifiers before it grows.
    public init(capacity: Int = 4) {
        var size = 8
        while size < capacity * 2 { size *= 2 }
        keys = Array(repeating: -1, count: size)
        values = Array(repeating: nil, count: size)
        mask = size - 1
    }

    /// The slot that holds `key`; nil when it is not held.
    @inlinable
    public func slot(of key: Int) -> Int? {
        // A free slot holds -1: a negative key is never held, and must not match one.
        guard key >= 0 else { return nil }
        var slot = key & mask
        while true {
            let held = keys[slot]
            if held == key { return slot }
            if held < 0 { return nil }
            slot = (slot &+ 1) & mask
        }
    }

    /// The value in `slot`, which ``slot(of:)`` found, read and set without looking the key up again.
    @inlinable
    public subscript(slot slot: Int) -> Value {
        get { values[slot]! }
        set { values[slot] = newValue }
    }

    /// The value filed under `key`, nil when none is. Setting nil removes it.
    @inlinable
    public subscript(key: Int) -> Value? {
        get { slot(of: key).map { values[$0]! } }
        set {
            if let newValue {
                insert(newValue, for: key)
            } else {
                remove(key)
            }
        }
    }

    /// Files `value` under `key`, replacing what was filed under it.
    @inlinable
    public mutating func insert(_ value: Value, for key: Int) {
        precondition(key >= 0, "identifiers are not negative")
        if let slot = slot(of: key) {
            values[slot] = value
            return
        }
        if (held + 1) * 2 > keys.count { grow() }
        var slot = key & mask
        while keys[slot] >= 0 { slot = (slot &+ 1) & mask }
        keys[slot] = key
        values[slot] = value
        held += 1
    }

    /// Removes what is filed under `key` and returns it; nil when nothing is.
    ///
    /// The entries after it in its run of used slots move back into the room it leaves when their own slot is not
    /// between the room and where they lie: every identifier stays reachable from its slot without a marker for
    /// removed ones.
    @inlinable
    @discardableResult
    public mutating func remove(_ key: Int) -> Value? {
        guard var room = slot(of: key) else { return nil }
        let removed = values[room]
        var next = (room &+ 1) & mask
        while keys[next] >= 0 {
            let home = keys[next] & mask
            // Whether `home` lies cyclically in (room, next]: then the entry stays where it is.
            let staysPut = room <= next ? (room < home && home <= next) : (room < home || home <= next)
            if !staysPut {
                keys[room] = keys[next]
                values[room] = values[next]
                room = next
            }
            next = (next &+ 1) & mask
        }
        keys[room] = -1
        values[room] = nil
        held -= 1
        return removed
    }

    /// Twice the slots, every held identifier filed again.
    @usableFromInline
    mutating func grow() {
        let oldKeys = keys
        let oldValues = values
        keys = Array(repeating: -1, count: oldKeys.count * 2)
        values = Array(repeating: nil, count: oldKeys.count * 2)
        mask = keys.count - 1
        held = 0
        for (slot, key) in oldKeys.enumerated() where key >= 0 {
            insert(oldValues[slot]!, for: key)
        }
    }
}

extension IdentifierTable: Sendable where Value: Sendable {}
