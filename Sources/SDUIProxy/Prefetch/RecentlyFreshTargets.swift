import NIOCore
import SDUIProxyCore

/// The navigation targets an event loop found fresh in the cache lately, so that components stored after that on
/// the same loop do not ask the cache again.
///
/// Every stored component that links to other screens asks whether they are cached, and on a busy proxy the
/// answer is nearly always yes: the same few screens, asked about on every miss. Asking takes the lock of the
/// entry's cache shard and a reference to the entry, both written by every loop in turn (1.4 % of a miss's
/// user-space cycles with two linked screens). A target counts as fresh here for ``recheckInterval`` (a second)
/// after it was found fresh. A screen evicted, purged or gone stale within that second is not prefetched for the
/// components this loop stores in it; the first one stored after it asks the cache again.
final class RecentlyFreshTargets {
    /// How long a target found fresh is taken to stay fresh without asking the cache.
    let recheckInterval: TimeAmount
    /// The most targets remembered; past this all are forgotten, and found again on the next components stored.
    let capacity: Int

    static let defaultRecheckInterval = TimeAmount.seconds(1)

    init(recheckInterval: TimeAmount = defaultRecheckInterval, capacity: Int = 1024) {
        self.recheckInterval = recheckInterval
        self.capacity = capacity
        // Grown as targets are found, not made for all of them: most proxies link to a few dozen screens.
        self.entries = IdentifierTable()
    }

    /// A target found fresh for a platform, and when.
    private struct Entry {
        let target: String
        /// A string of its own, not a slice of the cache key's variant, which would keep the vary values alive.
        let platform: String
        let foundAt: NIODeadline
    }

    /// The entries filed by the ``ByteHash`` of target and platform (``IdentifierTable``: a dictionary ran `Hasher`
    /// over that hash again, and every stored component that links to screens looks up each of them). Two pairs
    /// with one hash share a slot, the later replacing the earlier: a lookup checks the strings, so a pair found is
    /// the pair asked for, and one replaced is only asked about in the cache again.
    private var entries: IdentifierTable<Entry>

    var count: Int { entries.count }

    /// Whether `target` was found fresh for `platform` less than ``recheckInterval`` before `now`.
    func contains(_ target: String, platform: Substring, at now: NIODeadline) -> Bool {
        let platform = String(platform)
        guard let entry = entries[Self.key(target, platform)], entry.target == target, entry.platform == platform
        else { return false }
        return now - entry.foundAt < recheckInterval
    }

    /// Records that the cache holds a fresh entry for `target` and `platform` at `now`.
    func insert(_ target: String, platform: Substring, at now: NIODeadline) {
        if entries.count >= capacity { entries = IdentifierTable() }
        let platform = String(platform)
        entries[Self.key(target, platform)] = Entry(target: target, platform: platform, foundAt: now)
    }

    /// The slot key of a pair: its hash, made non-negative.
    private static func key(_ target: String, _ platform: String) -> Int {
        ByteHash.hash(target, platform) & Int.max
    }
}
