/// Finds an ``LRUStore``'s nodes by their keys' hashes: an open-addressing table (linear probing, deletion by
/// shifting back, so no tombstones build up) of 32-bit node numbers, each beside 32 bits of its key's hash.
///
/// The keys stay in the nodes: a probe compares the stored bits first and asks the caller to compare keys only
/// when they match, so a lookup nearly always touches one node; and the table grows without hashing any key
/// again. Eight bytes a slot, at most three quarters full.
struct NodeIndex {
    /// A slot: 32 bits of the key's hash, then the node number plus one; 0 when empty.
    private var slots: [UInt64] = []
    private(set) var count = 0

    private var mask: Int { slots.count - 1 }

    /// The first node whose key `matches` among those with `hash`.
    func first(hash: Int, where matches: (UInt32) -> Bool) -> UInt32? {
        guard count > 0 else { return nil }
        let tag = Self.tag(hash)
        var position = Int(tag) & mask
        while true {
            let slot = slots[position]
            if slot == 0 { return nil }
            if slot >> 32 == tag, matches(Self.node(slot)) { return Self.node(slot) }
            position = (position + 1) & mask
        }
    }

    /// Adds `node`, whose key has `hash`, and which the table does not hold.
    mutating func insert(_ node: UInt32, hash: Int) {
        precondition(node < UInt32.max, "a node number must leave room for the empty slot")
        if (count + 1) * 4 > slots.count * 3 { grow() }
        place(UInt64(Self.tag(hash)) << 32 | UInt64(node + 1))
        count += 1
    }

    /// Removes `node`, whose key has `hash`.
    mutating func remove(_ node: UInt32, hash: Int) {
        guard count > 0 else { return }
        let wanted = UInt64(node + 1)
        var hole = Int(Self.tag(hash)) & mask
        while slots[hole] & 0xFFFF_FFFF != wanted {
            guard slots[hole] != 0 else { return }
            hole = (hole + 1) & mask
        }
        // Shift back the slots after the hole that would otherwise no longer be reached from their home position.
        var next = (hole + 1) & mask
        while slots[next] != 0 {
            let home = Self.home(slots[next]) & mask
            // A slot whose probe starts in the cyclic range (hole, next] is still reached; any other moves into the
            // hole, which its probe passes.
            let reachable = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next)
            if !reachable {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = 0
        count -= 1
    }

    private mutating func place(_ slot: UInt64) {
        var position = Self.home(slot) & mask
        while slots[position] != 0 { position = (position + 1) & mask }
        slots[position] = slot
    }

    private mutating func grow() {
        let old = slots
        slots = [UInt64](repeating: 0, count: max(8, old.count * 2))
        for slot in old where slot != 0 {
            place(slot)
        }
    }

    // MARK: Slots

    /// The bits of a hash kept in the slot, which also give its position: its lower 32.
    private static func tag(_ hash: Int) -> UInt32 {
        UInt32(truncatingIfNeeded: hash)
    }

    private static func node(_ slot: UInt64) -> UInt32 {
        UInt32(truncatingIfNeeded: slot) - 1
    }

    /// Where a slot's probe starts, before masking to the table's size.
    private static func home(_ slot: UInt64) -> Int {
        Int(truncatingIfNeeded: slot >> 32)
    }
}
