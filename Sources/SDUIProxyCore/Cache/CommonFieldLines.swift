import Synchronization

/// The header lines of a stored response that other responses carry word for word, kept once for all of them.
///
/// A backend sends most of its fields alike on every screen: `Server`, `Content-Type`, `Cache-Control`, and the
/// `Vary` the proxy merges in. Those lines were over a hundred bytes of every entry. An entry keeps the lines
/// whose values are its own (``isOwn(_:)``: `Date`, `Last-Modified`, `Expires`, `Set-Cookie`) with its forms, and
/// the rest in one of these, found again by its bytes (``interned(_:)``) and shared.
///
/// The table that finds them is small and fixed: a slot per hash, where a new block replaces the one there. An
/// entry holds its block; the table only helps the next entry find it. So responses whose lines are all different
/// (a backend sending a trace id in every response) cost a block each and never grow the table, and a block goes
/// with the last entry that holds it. Blocks over ``maximumSharedBytes`` are not put in the table, so that it
/// holds at most a megabyte of blocks no entry holds any more.
///
/// Every entry counts its block's bytes in its cost, shared or not: the byte budget counts each entry's header
/// lines and bodies, as it says, and errs on the side of room.
public final class CommonFieldLines: Sendable {
    /// The lines, `name: value` and CRLF each.
    public let lines: [UInt8]

    private init(lines: [UInt8]) {
        self.lines = lines
    }

    /// What the block costs in memory: its object and its array.
    public var byteCost: Int { lines.count + 64 }

    /// The largest block the table keeps for other entries to find.
    static let maximumSharedBytes = 1_024

    /// The block of no lines.
    static let none = CommonFieldLines(lines: [])

    /// Whether a line named `name` carries a value of the response's own, so that its entry keeps it: those that
    /// name times and the cookie.
    static func isOwn(_ name: UnsafeRawBufferPointer) -> Bool {
        HTTPSyntax.equalsIgnoringCase(bytes: name, "date")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "last-modified")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "expires")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "set-cookie")
    }

    /// The block of `lines`: the one the table holds when it has these very bytes, else a new one, which takes its
    /// slot (unless it is over ``maximumSharedBytes``).
    static func interned(_ lines: UnsafeRawBufferPointer) -> CommonFieldLines {
        guard !lines.isEmpty else { return none }
        guard lines.count <= maximumSharedBytes else { return CommonFieldLines(lines: Array(lines)) }
        return table.intern(lines)
    }

    private static let table = Table(slotCount: 1024)

    /// The slots, one per hash, under one lock: taken once per stored response, never by a hit.
    final class Table: Sendable {
        private let slots: Mutex<[CommonFieldLines?]>
        private let mask: Int

        /// - Parameter slotCount: a power of two.
        init(slotCount: Int) {
            slots = Mutex([CommonFieldLines?](repeating: nil, count: slotCount))
            mask = slotCount - 1
        }

        func intern(_ lines: UnsafeRawBufferPointer) -> CommonFieldLines {
            let slot = ByteHash.hash(lines) & mask
            if let found = slots.withLock({ slots in slots[slot] }),
                found.lines.withUnsafeBytes({ ByteSearch.same($0, lines) })
            {
                return found
            }
            // Made outside the lock; two stores of the same new lines at once make two blocks, and the slot keeps
            // the last.
            let made = CommonFieldLines(lines: Array(lines))
            slots.withLock { slots in slots[slot] = made }
            return made
        }
    }
}
