import NIOHTTP1

/// What a stored response is found by: the normalised request target plus the variant the request asks for
/// (its platform and the values of the configured vary headers).
///
/// The hash is computed once, when the key is built, because a key is hashed twice on every lookup (to pick
/// the cache shard, then inside the shard's table).
public struct CacheKey: Hashable, Sendable, CustomStringConvertible {
    /// `path?query`, normalised.
    public let target: String
    /// The platform, then each vary header's value, separated by a byte no header can carry.
    public let variant: String
    /// Precomputed, stable for this process.
    public let hashCode: Int

    public init(target: String, platform: String, varyValues: [String] = []) {
        var variant = platform
        for value in varyValues {
            variant.append("\u{0}")
            variant.append(value)
        }
        self.init(target: target, variant: variant)
    }

    init(target: String, variant: String) {
        // Every request the cache path takes builds a key: `Hasher` (SipHash) over the two strings cost it about
        // 600 instructions. Collisions cost a longer search only: keys compare their strings too.
        self.init(target: target, variant: variant, hashCode: ByteHash.hash(target, variant))
    }

    /// A key with the hash given: for tests of keys that collide.
    init(target: String, variant: String, hashCode: Int) {
        self.target = target
        self.variant = variant
        self.hashCode = hashCode
    }

    /// The key of a request for `target` on `platform` with `headers`, on a route whose `vary` names these
    /// headers; the platform header among them is the key's platform already.
    public static func forRoute(
        target: String,
        platform: String,
        headers: HTTPHeaders,
        vary: [String],
        platformHeader: String
    ) -> CacheKey {
        let varyValues = vary.compactMap { name -> String? in
            guard name != platformHeader else { return nil }
            return VaryValue.of(name, in: headers)
        }
        return CacheKey(target: target, platform: platform, varyValues: varyValues)
    }

    /// This key extended with the values of the headers a backend's `Vary` names.
    public func selectingVariant(_ values: String) -> CacheKey {
        CacheKey(target: target, variant: variant + "\u{1}" + values)
    }

    public static func == (lhs: CacheKey, rhs: CacheKey) -> Bool {
        lhs.hashCode == rhs.hashCode && lhs.target == rhs.target && lhs.variant == rhs.variant
    }

    /// The part of ``hashCode`` stores hash and compare first: what a ``StoredCacheKey`` keeps of it.
    var storedHash: UInt32 { UInt32(truncatingIfNeeded: hashCode) }

    /// What a store of ``StoredCacheKey``s files this key's entry by: ``StoredCacheKey/storeHash``.
    var storeHash: Int { StoredCacheKey.storeHash(storedHash) }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(storedHash)
    }

    /// The platform part of the variant.
    public var platform: Substring {
        // Over the UTF-8 bytes in place: both separators are ASCII, stepping `Character`s checks for a grapheme
        // break at every step, and stepping the UTF-8 view's indices cost a miss about 200 instructions.
        let count = variant.withContiguousUTF8 { bytes in
            bytes.firstIndex { $0 == 0 || $0 == 1 } ?? bytes.count
        }
        return variant[..<variant.utf8.index(variant.utf8.startIndex, offsetBy: count)]
    }

    public var description: String {
        "\(target) [\(variant.replacingOccurrences(of: "\u{0}", with: "|").replacingOccurrences(of: "\u{1}", with: "|"))]"
    }
}

extension String {
    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: Character(target), omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
