import NIOCore
import NIOHTTP1
import Synchronization

/// The in-memory response cache: LRU under a byte budget and an entry limit, split into shards that each
/// have their own lock, so event loops looking up different keys never wait for one another.
///
/// The budget is divided evenly between shards; a key's shard is chosen by its hash. An entry larger than
/// one shard's budget is not stored.
///
/// Responses with `Vary` live side by side (RFC 9111 section 4.1): the primary key holds the list of
/// header names the backend varies on, and each variant is stored under the primary key extended with
/// the request's values for those headers.
public final class ResponseCache: Sendable {
    /// Counters of what happened to lookups and entries, summed over shards.
    public struct Statistics: Equatable, Sendable {
        public var entries = 0
        public var bytes = 0
        public var hits = 0
        public var misses = 0
        public var staleServes = 0
        public var revalidations = 0
        public var stores = 0
        public var evictions = 0
        /// Responses removed by (hard) invalidations.
        public var purged = 0
        /// Responses a soft invalidation reached (made stale, or found stale already).
        public var softPurged = 0
        public var rejectedAsTooLarge = 0
        /// The bytes of the stored bodies in each form: identity, and every coding the cache keeps.
        public var bodyBytesByForm: [String: Int] = [:]
        /// Responses kept in at least one content coding beside identity.
        public var compressedEntries = 0
        /// Compressions finished after their entry was stored that found it replaced or gone, and were dropped.
        public var compressionsDropped = 0
        /// Keys holding parts of a representation, not all of it (counted in ``entries`` too).
        public var partialEntries = 0
        /// Range requests answered from held parts (counted in ``hits`` too).
        public var partialHits = 0

        public init() {}
    }

    /// The outcome of a lookup.
    public enum Lookup: Sendable {
        case fresh(CachedResponse)
        case stale(CachedResponse)
        /// Nothing is stored for the target.
        case miss
        /// The target has stored variants, but not the one the request selects.
        case varyMiss
    }

    /// What is stored under a key.
    enum Slot: Sendable {
        case response(CachedResponse)
        /// The backend varies on these request headers: look again under the variant key.
        case variants(names: [String])
        /// Parts of the representation, not all of it (``PartialContent``): a lookup misses. Boxed, so that a
        /// slot, which every node of the store holds, stays one reference wide.
        indirect case partial(PartialContent)

        var isVariantList: Bool {
            if case .variants = self { true } else { false }
        }

        var isPartial: Bool {
            if case .partial = self { true } else { false }
        }

        /// Whether the slot holds a whole response.
        var isResponse: Bool {
            if case .response = self { true } else { false }
        }
    }

    final class Shard: Sendable {
        struct State {
            var store: LRUStore<StoredCacheKey, Slot>
            var statistics = Statistics()
            /// How many of the store's slots are lists of varying headers, not responses: the entries
            /// reported are the responses.
            var variantLists = 0
            /// How many of the store's slots hold parts of a representation (``PartialContent``).
            var partials = 0
            /// The body bytes of the stored responses in each form, kept as they come and go.
            var forms = StoredFormTally()
        }

        let state: Mutex<State>

        init(costLimit: Int, countLimit: Int) {
            state = Mutex(State(store: LRUStore(costLimit: costLimit, countLimit: countLimit)))
        }
    }

    let shards: [Shard]
    private let shardMask: Int
    /// The invalidations of the last while and the fills in flight, for the fills they reach
    /// (``InvalidationHistory``): one for the whole cache, taken twice a fill and once an invalidation.
    let history: Mutex<InvalidationHistory>
    /// The history's last invalidation number, read without its lock: a fill that no invalidation came after
    /// (nearly all) stores without taking it.
    let lastInvalidation = Atomic<UInt64>(0)
    /// How many responses each target has stored, over its platforms and variants: for telling a miss with other
    /// variants stored from one with none.
    let storedTargets: StoredTargets

    /// - Parameters:
    ///   - maxBytes: the total byte budget.
    ///   - maxEntries: the total entry limit.
    ///   - shardCount: a power of two; by default one shard per 4 MiB of budget, between 1 and 32.
    ///   - fillRetention: how long invalidations are remembered for the fills in flight they reach: longer than a
    ///     fill takes (``fillRetention``).
    public init(maxBytes: Int, maxEntries: Int, shardCount: Int? = nil, fillRetention: TimeAmount = .minutes(2)) {
        history = Mutex(InvalidationHistory(retention: fillRetention))
        let count = shardCount ?? Self.defaultShardCount(maxBytes: maxBytes)
        precondition(count > 0 && count & (count - 1) == 0, "the shard count must be a power of two")
        let costLimit = max(1, maxBytes / count)
        let countLimit = max(1, maxEntries / count)
        shards = (0..<count).map { _ in Shard(costLimit: costLimit, countLimit: countLimit) }
        shardMask = count - 1
        storedTargets = StoredTargets(shardCount: count)
    }

    static func defaultShardCount(maxBytes: Int) -> Int {
        var count = 1
        while count < 32, maxBytes / (count * 2) >= 4 << 20 { count *= 2 }
        return count
    }

    /// Runs `body` under the lock of `key`'s shard. The shard is reached without a reference count: every loop
    /// locks the same shards, and retaining one wrote its count from both processors in turn, on every hit.
    /// Sound because ``shards`` holds every shard for the cache's life.
    @inline(__always)
    func withShard<Result: Sendable>(
        for key: CacheKey,
        _ body: (inout sending Shard.State) -> Result
    ) -> Result {
        Unmanaged.passUnretained(shards[key.hashCode & shardMask])._withUnsafeGuaranteedRef { shard in
            shard.state.withLock { state in body(&state) }
        }
    }

    /// The key of the variant `requestHeaders` select, given the header names the backend varies on.
    public static func variantKey(_ key: CacheKey, names: [String], requestHeaders: HTTPHeaders) -> CacheKey {
        key.selectingVariant(variantValue(names: names, requestHeaders: requestHeaders))
    }

    /// The request's values for `names`, normalised (``VaryValue``), as one string (the
    /// ``CachedResponse/variant`` it would select).
    public static func variantValue(names: [String], requestHeaders: HTTPHeaders) -> String {
        names.map { VaryValue.of($0, in: requestHeaders) }.joined(separator: "\u{0}")
    }

    /// Finds the entry for `key` (and, when the backend varies, for the variant `requestHeaders` select) and
    /// marks it most recently used. Fresh entries count as hits and absent ones as misses; what a stale entry
    /// turns into is for the caller to record.
    ///
    /// A miss is a ``Lookup/varyMiss`` when the target has a response stored for another platform, other values
    /// of the route's vary headers, or other values of those its backend's `Vary` names.
    public func lookup(_ key: CacheKey, requestHeaders: HTTPHeaders, now: NIODeadline) -> Lookup {
        switch lookupOne(key, now: now) {
        case .found(.miss):
            return storedTargets.contains(key.target) ? .varyMiss : .miss
        case .found(let lookup):
            return lookup
        case .varies(let names):
            switch lookupOne(Self.variantKey(key, names: names, requestHeaders: requestHeaders), now: now) {
            case .found(.miss): return .varyMiss
            case .found(let lookup): return lookup
            case .varies: return .varyMiss
            }
        }
    }

    /// Whether a fresh entry exists for `key`, without counting a hit or a miss or touching recency: for
    /// deciding whether background work is needed.
    public func hasFreshEntry(_ key: CacheKey, requestHeaders: HTTPHeaders, now: NIODeadline) -> Bool {
        guard case .response(let entry)? = peekSelected(key, requestHeaders: requestHeaders).slot else { return false }
        return entry.isFresh(at: now) && !entry.revalidation.contains(.noCache)
    }

    /// What is stored for the request `requestHeaders` make for `key`, and under which key: `key`'s own slot, or,
    /// when `key` holds the list of the headers the backend varies on, the slot of the variant they select. Counts
    /// nothing and touches no recency.
    func peekSelected(_ key: CacheKey, requestHeaders: HTTPHeaders) -> (key: CacheKey, slot: Slot?) {
        let slot = withShard(for: key) { $0.store.peek(key) }
        guard case .variants(let names)? = slot else { return (key, slot) }
        let variant = Self.variantKey(key, names: names, requestHeaders: requestHeaders)
        return (variant, withShard(for: variant) { $0.store.peek(variant) })
    }

    private enum SlotLookup {
        case found(Lookup)
        case varies(names: [String])
    }

    /// One locked visit to a shard: find, classify and count.
    @inline(__always)
    private func lookupOne(_ key: CacheKey, now: NIODeadline) -> SlotLookup {
        withShard(for: key) { state -> SlotLookup in
            switch state.store.value(forKey: key) {
            case .response(let entry)?:
                guard entry.isFresh(at: now), !entry.revalidation.contains(.noCache) else {
                    return .found(.stale(entry))
                }
                state.statistics.hits += 1
                return .found(.fresh(entry))
            case .variants(let names)?:
                return .varies(names: names)
            case nil, .partial?:
                state.statistics.misses += 1
                return .found(.miss)
            }
        }
    }

    /// Counts a request answered from a stale entry.
    public func recordStaleServe(_ key: CacheKey) {
        withShard(for: key) { $0.statistics.staleServes += 1 }
    }

    /// Counts a successful revalidation with the backend.
    public func recordRevalidation(_ key: CacheKey) {
        withShard(for: key) { $0.statistics.revalidations += 1 }
    }

    /// Stores `response` for `key`, evicting least recently used entries of its shard as needed. A response
    /// that varies goes under its variant key, with the list of varying headers under `key`.
    ///
    /// - Parameter variant: the values of the headers the backend varies on that the response is filed under; by
    ///   default its own (``CachedResponse/variant``), those of the request it answered.
    /// - Returns: whether it was stored (false when it alone exceeds a shard's budget).
    @discardableResult
    public func store(_ response: CachedResponse, for key: CacheKey, variant: String? = nil) -> Bool {
        guard !response.varyNames.isEmpty else {
            // A server error names no Vary as a rule, whatever the target's successes vary on: stored over their
            // list, it would make every variant unreachable, and answer them all with the error.
            if response.status.code >= 500, withShard(for: key, { $0.store.peek(key)?.isVariantList ?? false }) {
                return false
            }
            return insert(.response(response), for: key, cost: response.byteCost)
        }
        let marker = response.varyNames.reduce(64) { $0 + $1.utf8.count }
        guard insert(.variants(names: response.varyNames), for: key, cost: marker) else { return false }
        return insert(
            .response(response),
            for: key.selectingVariant(variant ?? response.variant),
            cost: response.byteCost
        )
    }

    /// Puts `slot` under `key`, when `replaces` takes what the key holds (checked under the same lock).
    func insert(
        _ slot: Slot,
        for key: CacheKey,
        cost: Int,
        replaces: (Slot?) -> Bool = { _ in true }
    ) -> Bool {
        var evicted = Evicted()
        var replacesResponse = false
        var refused = false
        let stored = withShard(for: key) { state in
            let replaced = state.store.peek(key)
            guard replaces(replaced) else {
                refused = true
                return false
            }
            let replacesList = replaced?.isVariantList ?? false
            replacesResponse = replaced?.isResponse ?? false
            let stored = state.store.insert(slot, forKey: StoredCacheKey(key), cost: cost) { key, slot in
                state.forms.count(slot, -1)
                evicted.keep(key, slot)
            }
            // What the key held is gone, replaced or with a replacement too large to keep.
            state.forms.count(replaced, -1)
            if stored { state.forms.count(slot, 1) }
            state.statistics.evictions += evicted.responses
            state.variantLists += (stored && slot.isVariantList ? 1 : 0) - (replacesList ? 1 : 0) - evicted.lists
            state.partials +=
                (stored && slot.isPartial ? 1 : 0) - (replaced?.isPartial == true ? 1 : 0) - evicted.partials
            if !stored {
                state.statistics.rejectedAsTooLarge += 1
            } else if !slot.isVariantList {
                // The list of a target's varying headers, stored with each varying response, is not a store.
                state.statistics.stores += 1
            }
            return stored
        }
        if refused { return false }
        // The key held a response before (replaced, or gone with a replacement too large to keep), and holds one
        // after when this one was stored.
        storedTargets.add((stored && slot.isResponse ? 1 : 0) - (replacesResponse ? 1 : 0), for: key.target)
        evicted.forEachResponse { storedTargets.add(-1, for: $0.target) }
        // The evicted entries are freed here, after the lock: freeing reads memory long out of the processor's
        // caches and can wait for the allocator of the thread that made them, and lookups on the shard would
        // wait for both.
        withExtendedLifetime(evicted) {}
        return stored
    }

    /// What one insert evicted, held until the shard's lock is released; the usual single eviction needs no
    /// allocation.
    private struct Evicted {
        private var first: (StoredCacheKey, Slot)?
        private var more: [(StoredCacheKey, Slot)] = []
        /// Responses and parts evicted: what the statistics count as evictions.
        private(set) var responses = 0
        private(set) var lists = 0
        private(set) var partials = 0

        mutating func keep(_ key: StoredCacheKey, _ slot: Slot) {
            if first == nil { first = (key, slot) } else { more.append((key, slot)) }
            if slot.isVariantList { lists += 1 } else { responses += 1 }
            if slot.isPartial { partials += 1 }
        }

        /// Calls `body` with the key of each evicted whole response.
        func forEachResponse(_ body: (StoredCacheKey) -> Void) {
            if let (key, slot) = first, slot.isResponse { body(key) }
            for (key, slot) in more where slot.isResponse { body(key) }
        }
    }

    // MARK: Fills in flight

    /// How long invalidations are remembered for the fills in flight: longer than a fill takes (the upstream's
    /// head and body timeouts). A fill that outlasts it is not stored when an invalidation came while it ran.
    public var fillRetention: TimeAmount {
        get { history.withLock { $0.retention } }
        set { history.withLock { $0.retention = newValue } }
    }

    /// How many fills are in flight.
    public var fillsInFlight: Int { history.withLock { $0.fillCount } }

    /// Notes a fill of `target` starting: the ticket goes to ``storeFill(_:for:ticket:)`` and ``endFill(_:)``.
    public func beginFill(target: String) -> InvalidationHistory.Ticket {
        history.withLock { $0.beginFill(target: target) }
    }

    /// Notes that the fill of `ticket` has ended, whatever became of it.
    public func endFill(_ ticket: InvalidationHistory.Ticket) {
        history.withLock { $0.endFill(ticket) }
    }

    /// The number of the last invalidation, for ``mayJoinFill(startedAfter:target:)``.
    public var lastInvalidationSequence: UInt64 { lastInvalidation.load(ordering: .sequentiallyConsistent) }

    /// Whether a request for `target` may join a fill that started when ``lastInvalidationSequence`` was
    /// `sequence`: no invalidation since may reach it.
    public func mayJoinFill(startedAfter sequence: UInt64, target: String) -> Bool {
        guard lastInvalidation.load(ordering: .sequentiallyConsistent) != sequence else { return true }
        return history.withLock { $0.mayJoin(runStartedAfter: sequence, target: target) }
    }

    /// What became of a fill's answer.
    public enum FillStore: Sendable {
        /// Stored: this entry.
        case stored(CachedResponse)
        /// Stored stale, as of a soft invalidation that reached the fill: this entry.
        case storedStale(CachedResponse)
        /// Not stored: an invalidation since the fill started reaches it; `reason` says which.
        case voided(reason: String)
        /// Not stored: larger than a shard's budget, or an error over stored variants (``store(_:for:)``).
        case rejected
    }

    /// Stores the answer of the fill that holds `ticket`, unless an invalidation since the fill started reaches
    /// it (``InvalidationHistory/verdict(for:target:tags:)``): a hard one voids it, a soft one stores it stale as
    /// of that invalidation.
    ///
    /// Checked before storing and again after: an invalidation recorded between the two may have visited the
    /// shard before the entry was in it. One recorded after the second check visits the shard after the entry is
    /// in it, and reaches it as any stored entry.
    public func storeFill(
        _ entry: CachedResponse,
        for key: CacheKey,
        ticket: InvalidationHistory.Ticket
    ) -> FillStore {
        var entry = entry
        var stale = false
        var (verdict, checked) = fillVerdict(since: ticket.sequence, target: key.target, tags: entry.tags)
        switch verdict {
        case .discard(let reason):
            return .voided(reason: reason)
        case .storeStale(let instant):
            entry = entry.softPurged(at: instant) ?? entry
            stale = true
        case .store:
            break
        }
        guard store(entry, for: key) else { return .rejected }
        (verdict, _) = fillVerdict(since: checked, target: key.target, tags: entry.tags)
        switch verdict {
        case .store:
            return stale ? .storedStale(entry) : .stored(entry)
        case .discard(let reason):
            remove(entry, storedFor: key, countingAsPurged: false)
            return .voided(reason: reason)
        case .storeStale(let instant):
            // Replaced only while it is still what is stored: whatever replaced it since is newer.
            if let softPurged = entry.softPurged(at: instant), replace(entry, with: softPurged, storedFor: key) {
                return .storedStale(softPurged)
            }
            return .storedStale(entry)
        }
    }

    /// The verdict on an answer asked for when `sequence` was the last invalidation's number, and the number it
    /// was given at.
    func fillVerdict(
        since sequence: UInt64,
        target: String,
        tags: [String]
    ) -> (InvalidationHistory.Verdict, UInt64) {
        let last = lastInvalidation.load(ordering: .sequentiallyConsistent)
        guard last != sequence else { return (.store, last) }
        return history.withLock { history in
            (history.verdict(since: sequence, target: target, tags: tags), history.lastSequence)
        }
    }

    /// Stores `compressed` (``CachedResponse/adding(_:)`` made it from `entry`) in place of `entry`, if `entry`
    /// is still what is stored for `key`: a compression that finished after its entry was stored. An entry
    /// replaced, purged or evicted meanwhile stays so; the compression is dropped and counted.
    ///
    /// The entry's cost grows by its new forms, and less recently used entries make room as for any store. A
    /// replacement too large for its shard is dropped, and the entry stays as it was.
    @discardableResult
    public func storeCompressed(
        _ compressed: CachedResponse,
        replacing entry: CachedResponse,
        for key: CacheKey
    )
        -> Bool
    {
        let key = entry.varyNames.isEmpty ? key : key.selectingVariant(entry.variant)
        var evicted = Evicted()
        let stored = withShard(for: key) { state -> Bool in
            guard case .response(let stored)? = state.store.peek(key), stored === entry,
                compressed.byteCost <= state.store.costLimit
            else {
                state.statistics.compressionsDropped += 1
                return false
            }
            state.forms.count(.response(stored), -1)
            state.forms.count(.response(compressed), 1)
            state.store.insert(.response(compressed), forKey: StoredCacheKey(key), cost: compressed.byteCost) {
                key,
                slot in
                state.forms.count(slot, -1)
                evicted.keep(key, slot)
            }
            state.statistics.evictions += evicted.responses
            state.variantLists -= evicted.lists
            state.partials -= evicted.partials
            return true
        }
        evicted.forEachResponse { storedTargets.add(-1, for: $0.target) }
        withExtendedLifetime(evicted) {}
        return stored
    }

    /// Replaces `entry` by `replacement` if it is still what is stored for `key`, in place.
    private func replace(_ entry: CachedResponse, with replacement: CachedResponse, storedFor key: CacheKey) -> Bool {
        let key = entry.varyNames.isEmpty ? key : key.selectingVariant(entry.variant)
        return withShard(for: key) { state -> Bool in
            guard case .response(let stored)? = state.store.peek(key), stored === entry else { return false }
            return state.store.replaceValue(forKey: key, with: .response(replacement))
        }
    }

    /// Removes `entry` if it is still what is stored for `key` (under its variant's key, when it varies), and
    /// counts it as purged: for a fill that finds its stale entry must not be served later. Not an invalidation:
    /// the target's other platforms and variants stay.
    @discardableResult
    public func remove(
        _ entry: CachedResponse,
        storedFor key: CacheKey,
        variant: String? = nil,
        countingAsPurged: Bool = true
    ) -> Bool {
        let key = entry.varyNames.isEmpty ? key : key.selectingVariant(variant ?? entry.variant)
        let removed = withShard(for: key) { state -> CachedResponse? in
            guard case .response(let stored)? = state.store.peek(key), stored === entry else { return nil }
            state.store.removeValue(forKey: key)
            state.forms.count(.response(stored), -1)
            if countingAsPurged { state.statistics.purged += 1 }
            return stored
        }
        if removed != nil { storedTargets.add(-1, for: key.target) }
        return removed != nil
    }
}

/// The store looked up by the keys requests make; it keeps them as ``StoredCacheKey``s, with the same hash.
extension LRUStore where Key == StoredCacheKey {
    mutating func value(forKey key: CacheKey) -> Value? {
        value(hash: key.storeHash) { $0.matches(key) }
    }

    func peek(_ key: CacheKey) -> Value? {
        peek(hash: key.storeHash) { $0.matches(key) }
    }

    @discardableResult
    mutating func removeValue(forKey key: CacheKey) -> Value? {
        removeValue(hash: key.storeHash) { $0.matches(key) }
    }

    @discardableResult
    mutating func replaceValue(forKey key: CacheKey, with value: Value) -> Bool {
        replaceValue(hash: key.storeHash, where: { $0.matches(key) }, with: value)
    }
}
