import Synchronization

/// How many responses the cache holds per normalised target, over every platform and variant: what tells a miss
/// whose target has other variants stored (`Cache-Status: fwd=vary-miss`, RFC 9211) from one with nothing stored
/// (`fwd=uri-miss`).
///
/// A response's platform and configured vary values are part of its ``CacheKey``, so its variants lie in other
/// shards of the cache than the one a miss looks in. The counts are kept beside the shards, changed only when
/// responses are stored, evicted or removed, and read only on a miss: a hit never touches them.
///
/// The cache changes them after releasing a shard's lock, so the changes for one target may arrive out of order
/// (an eviction's before the store's it undoes). They are sums, not flags: a target counts as stored while its sum
/// is above zero, and is forgotten only when the sum is exactly zero, so every order ends with the right answer.
///
/// Targets are counted by their 64-bit hash (``ByteHash``), not kept as strings: a table of strings took some sixty
/// bytes of every cached response. Two targets with one hash would only make a miss on one of them say `vary-miss`
/// while the other is stored, a chance of about one in 10^8 with a million targets stored.
final class StoredTargets: Sendable {
    /// One lock's share of the counts.
    private final class Shard: Sendable {
        let counts = Mutex<[Int: Int32]>([:])
    }

    private let shards: [Shard]
    private let shardMask: Int

    /// - Parameter shardCount: a power of two.
    init(shardCount: Int) {
        precondition(shardCount > 0 && shardCount & (shardCount - 1) == 0, "the shard count must be a power of two")
        shards = (0..<shardCount).map { _ in Shard() }
        shardMask = shardCount - 1
    }

    /// Adds `delta` responses to `target`'s count.
    func add(_ delta: Int, for target: String) {
        guard delta != 0 else { return }
        let hash = ByteHash.hash(target)
        shards[hash & shardMask].counts.withLock { counts in
            // Changed where it lies, one lookup (a read and a write took two, a store's in every miss); a count
            // back at zero is looked up again to go.
            if Self.add(Int32(delta), to: &counts[hash, default: 0]) { counts[hash] = nil }
        }
    }

    /// Adds `delta` to `count`; whether the sum is zero.
    private static func add(_ delta: Int32, to count: inout Int32) -> Bool {
        count += delta
        return count == 0
    }

    /// Applies each change of `changes`.
    func apply(_ changes: [String: Int]) {
        for (target, delta) in changes { add(delta, for: target) }
    }

    /// Whether any response is stored for `target`.
    func contains(_ target: String) -> Bool {
        let hash = ByteHash.hash(target)
        return shards[hash & shardMask].counts.withLock { ($0[hash] ?? 0) > 0 }
    }
}
