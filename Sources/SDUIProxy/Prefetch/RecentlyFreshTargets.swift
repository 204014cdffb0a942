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
    }

    private struct Key: Hashable {
        let target: String
        /// A string of its own, not a slice of the cache key's variant, which would keep the vary values alive.
        let platform: String

        /// The two strings' bytes through ``ByteHash`` as a pair, then the table's `Hasher` on that alone: `Hasher`
        /// over both strings cost each lookup about 450 instructions, and every stored component that links to
        /// screens looks up each of them. Equality still compares the strings.
        func hash(into hasher: inout Hasher) {
            hasher.combine(ByteHash.hash(target, platform))
        }
    }

    /// When each target was found fresh.
    private var foundFreshAt: [Key: NIODeadline] = [:]

    var count: Int { foundFreshAt.count }

    /// Whether `target` was found fresh for `platform` less than ``recheckInterval`` before `now`.
    func contains(_ target: String, platform: Substring, at now: NIODeadline) -> Bool {
        guard let found = foundFreshAt[Key(target: target, platform: String(platform))] else { return false }
        return now - found < recheckInterval
    }

    /// Records that the cache holds a fresh entry for `target` and `platform` at `now`.
    func insert(_ target: String, platform: Substring, at now: NIODeadline) {
        if foundFreshAt.count >= capacity { foundFreshAt.removeAll(keepingCapacity: true) }
        foundFreshAt[Key(target: target, platform: String(platform))] = now
    }
}
