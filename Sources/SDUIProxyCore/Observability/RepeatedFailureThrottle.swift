/// Decides which failures of a run of repeated ones reach the log.
///
/// During a backend outage every miss fails the same way, and a line for each is megabytes a minute of one
/// fact. The first failure of a key and kind is logged; the same key and kind again within ``interval`` is
/// only counted, and the next line logged for it after the interval says how many were left out.
///
/// At most ``capacity`` keys are remembered, so a flood of distinct keys cannot grow it without bound: when it
/// is full, keys whose interval has passed are forgotten, and if none has, the failure is counted under one
/// shared overflow slot (logged once an interval, with its own count).
public struct RepeatedFailureThrottle: Sendable {
    /// What to do with one failure.
    public enum Decision: Equatable, Sendable {
        /// Log it, saying how many of the same key and kind were left out since the last line.
        case log(suppressed: Int)
        /// Count it and leave it out.
        case suppress
    }

    private struct Slot {
        var loggedAt: Int64
        var suppressed: Int
    }

    private struct SlotKey: Hashable {
        var key: String
        var kind: String
    }

    /// The overflow slot's key, for failures of keys that did not fit.
    public static let overflowKey = "(other keys)"
    /// How much of a key is remembered: targets may be kilobytes long, and what tells them apart in a log is
    /// at their start.
    public static let maximumKeyBytes = 256

    /// How long a logged failure silences the same key and kind, in nanoseconds.
    public let interval: Int64
    /// How many keys are remembered at most.
    public let capacity: Int
    private var slots: [SlotKey: Slot] = [:]
    /// When the next remembered key's interval passes: sweeping earlier would free nothing.
    private var nextExpiry: Int64 = .min

    public init(intervalNanoseconds: Int64, capacity: Int = 10_000) {
        precondition(intervalNanoseconds > 0 && capacity > 0)
        self.interval = intervalNanoseconds
        self.capacity = capacity
    }

    /// The number of keys remembered now.
    public var count: Int { slots.count }

    /// Records a failure of `key` and `kind` at `now` (nanoseconds on a monotonic clock).
    public mutating func record(key: String, kind: String, now: Int64) -> Decision {
        let key =
            key.utf8.count <= Self.maximumKeyBytes
            ? key : String(decoding: key.utf8.prefix(Self.maximumKeyBytes), as: UTF8.self)
        var slotKey = SlotKey(key: key, kind: kind)
        if slots[slotKey] == nil, slots.count >= capacity {
            if now >= nextExpiry { sweep(now: now) }
            if slots.count >= capacity { slotKey = SlotKey(key: Self.overflowKey, kind: kind) }
        }
        guard var slot = slots[slotKey] else {
            // The overflow slot may itself be one slot past the capacity: one, whatever the flood.
            slots[slotKey] = Slot(loggedAt: now, suppressed: 0)
            return .log(suppressed: 0)
        }
        if now - slot.loggedAt < interval {
            slot.suppressed += 1
            slots[slotKey] = slot
            return .suppress
        }
        let suppressed = slot.suppressed
        slots[slotKey] = Slot(loggedAt: now, suppressed: 0)
        return .log(suppressed: suppressed)
    }

    /// Forgets the keys whose interval has passed (and the counts they held), and notes when to look again:
    /// when the next key's interval passes, but not sooner than an eighth of an interval, so a flood of new
    /// keys sweeps the table a few times an interval, not once per failure.
    private mutating func sweep(now: Int64) {
        slots = slots.filter { now - $0.value.loggedAt < interval }
        nextExpiry = max((slots.values.map(\.loggedAt).min() ?? now) + interval, now + interval / 8)
    }
}
