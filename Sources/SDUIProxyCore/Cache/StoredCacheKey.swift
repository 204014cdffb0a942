/// A ``CacheKey`` as the cache's LRU nodes keep it: its 32 bits of hash, target and variant in one object, one reference
/// wide.
///
/// Every stored response has a node, and a ``CacheKey`` inline in it (two strings and the hash, 40 bytes) made
/// each node 64 bytes where this makes it 32; with the node array's room to grow, that is about 40 bytes of every
/// entry. The target, over 15 bytes for nearly every screen path, had an allocation of its own already, so the
/// bytes moving into this one cost no allocation more.
///
/// Lookups keep using ``CacheKey``, made from the request as before, and compare it with this one's bytes
/// (``matches(_:)``): a hit allocates nothing for it. Only a store makes one, and only the paths that walk the
/// whole cache (a purge, the admin listing) turn one back into strings.
public struct StoredCacheKey: LRUStoreKey, @unchecked Sendable {
    // Sendable: the storage is written once, in `init`, and only read after.
    private let storage: Storage

    /// The lengths, then the target's bytes and the variant's, in one allocation.
    private final class Storage: ManagedBuffer<Header, UInt8> {}

    /// Twelve bytes, so that the bytes follow at 28: a key's 32 bits of hash are all a ``CacheKey`` hashes by.
    private struct Header {
        let hash: UInt32
        let targetCount: UInt32
        let variantCount: UInt32
    }

    public init(_ key: CacheKey) {
        storage = key.target.withContiguousUTF8 { target in
            key.variant.withContiguousUTF8 { variant in
                let made = Storage.create(minimumCapacity: target.count + variant.count) { buffer in
                    buffer.withUnsafeMutablePointerToElements { bytes in
                        if let base = target.baseAddress { bytes.update(from: base, count: target.count) }
                        if let base = variant.baseAddress {
                            (bytes + target.count).update(from: base, count: variant.count)
                        }
                    }
                    return Header(
                        hash: key.storedHash,
                        targetCount: UInt32(target.count),
                        variantCount: UInt32(variant.count)
                    )
                }
                // `create` makes an instance of the class it is called on.
                return unsafeDowncast(made, to: Storage.self)
            }
        }
    }

    private var header: Header { storage.header }

    /// The key's bytes: the target's, then the variant's.
    private func withBytes<Result>(
        _ body: (_ target: UnsafeBufferPointer<UInt8>, _ variant: UnsafeBufferPointer<UInt8>) -> Result
    ) -> Result {
        let header = header
        return storage.withUnsafeMutablePointerToElements { bytes in
            body(
                UnsafeBufferPointer(start: bytes, count: Int(header.targetCount)),
                UnsafeBufferPointer(start: bytes + Int(header.targetCount), count: Int(header.variantCount))
            )
        }
    }

    /// Whether `key` is the key this one was made from: the same hash, target and variant.
    public func matches(_ key: CacheKey) -> Bool {
        let header = header
        // The lengths first: both strings know theirs, and a key that differs in one needs no bytes compared.
        guard header.hash == key.storedHash, Int(header.targetCount) == key.target.utf8.count,
            Int(header.variantCount) == key.variant.utf8.count
        else { return false }
        return withBytes { target, variant in
            key.target.withContiguousUTF8 { Self.same($0, target) }
                && key.variant.withContiguousUTF8 { Self.same($0, variant) }
        }
    }

    /// Calls `body` with the target's UTF-8 bytes, where the key keeps them.
    public func withTarget<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        withBytes { target, _ in body(target) }
    }

    /// Whether the key's target is `target`, compared where the key keeps it.
    public func hasTarget(_ target: String) -> Bool {
        guard Int(header.targetCount) == target.utf8.count else { return false }
        return withTarget { stored in target.withContiguousUTF8 { Self.same(stored, $0) } }
    }

    /// `path?query`, normalised, as a string again.
    public var target: String {
        withBytes { target, _ in String(decoding: target, as: UTF8.self) }
    }

    /// The ``CacheKey`` this one was made from.
    public var cacheKey: CacheKey {
        withBytes { target, variant in
            CacheKey(target: String(decoding: target, as: UTF8.self), variant: String(decoding: variant, as: UTF8.self))
        }
    }

    /// The same hash as the ``CacheKey`` it was made from, so that a store finds one by the other.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(header.hash)
    }

    /// The hash kept, as the store files the key (``CacheKey/storeHash``): a `hashValue` would run it through
    /// SipHash again, about 150 instructions on every lookup, hits included, for bits that are SipHash's already.
    public var storeHash: Int { Self.storeHash(header.hash) }

    /// `storedHash` with its halves swapped: a shard's keys share the low bits that chose the shard, and a store's
    /// index places a key by the low bits of this. (Unswapped, they crowded a few runs of the index's slots.)
    static func storeHash(_ storedHash: UInt32) -> Int {
        Int(storedHash &>> 16 | storedHash &<< 16)
    }

    public static func == (lhs: StoredCacheKey, rhs: StoredCacheKey) -> Bool {
        if lhs.storage === rhs.storage { return true }
        return lhs.header.hash == rhs.header.hash
            && lhs.withBytes { lhsTarget, lhsVariant in
                rhs.withBytes { rhsTarget, rhsVariant in
                    same(lhsTarget, rhsTarget) && same(lhsVariant, rhsVariant)
                }
            }
    }

    private static func same(_ lhs: UnsafeBufferPointer<UInt8>, _ rhs: UnsafeBufferPointer<UInt8>) -> Bool {
        ByteSearch.same(UnsafeRawBufferPointer(lhs), UnsafeRawBufferPointer(rhs))
    }
}
