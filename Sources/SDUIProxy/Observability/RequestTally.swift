import Atomics
import NIOHTTP1
import SDUIProxyCore

/// Responses sent to clients (`sdui_requests_total`), as one event loop counts them: a count for each
/// combination of method, status class and cache result, added into the registry's counters when the metrics
/// are rendered.
///
/// A registry counter is one atomic that every loop adds to, and the object holding it is retained and
/// released by every loop too: each response moved those cache lines from one processor to the other (6 % of
/// a hit's user-space cycles). A tally is written by its own loop only, so its lines stay where they are.
/// Counts are atomics all the same, so a tally shared by callers off the loops stays exact, and rendering may
/// read it from any thread.
public final class RequestTally: @unchecked Sendable {
    static let methodLabels = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "OTHER"]
    static let statusClassLabels = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"]
    static let cacheLabels = ["none"] + CacheResult.allCases.map(\.rawValue)
    /// The protocol a response went out on: ``ClientProtocol``'s label.
    static let protocolLabels = ClientProtocol.allCases.map(\.label)
    /// One count per label combination: slot = ((protocol * methods + method) * status classes + status class)
    /// * cache results + cache.
    static let slotCount = protocolLabels.count * methodLabels.count * statusClassLabels.count * cacheLabels.count
    /// The forms stored responses are sent in (`sdui_cache_responses_by_encoding_total{encoding}`), counted in
    /// the slots after the requests' ones; then the body bytes the coded ones saved.
    static let formLabels = ["identity"] + ContentCoding.stored.map(\.rawValue)
    private static var savedBytesSlot: Int { slotCount + formLabels.count }
    /// The HTTP/2 streams clients opened (`sdui_http2_streams_total`), answered or not.
    private static var streamsSlot: Int { savedBytesSlot + 1 }
    private static var allSlotCount: Int { streamsSlot + 1 }

    /// The counts, alone on their cache lines: the allocation is aligned to 128 bytes and padded to a multiple of
    /// it, two 64-byte lines, since processors may fetch lines in adjacent pairs.
    /// Only reached through `UnsafeAtomic`, which is what makes sharing the class across threads sound.
    private let counts: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>
    private static let alignmentBytes = 128

    public init() {
        let bytes = Self.allSlotCount * MemoryLayout<UnsafeAtomic<Int>.Storage>.stride
        let padded = (bytes + Self.alignmentBytes - 1) / Self.alignmentBytes * Self.alignmentBytes
        counts = UnsafeMutableRawPointer.allocate(byteCount: padded, alignment: Self.alignmentBytes)
            .bindMemory(to: UnsafeAtomic<Int>.Storage.self, capacity: Self.allSlotCount)
        counts.initialize(repeating: UnsafeAtomic<Int>.Storage(0), count: Self.allSlotCount)
    }

    deinit {
        counts.deinitialize(count: Self.allSlotCount)
        UnsafeMutableRawPointer(counts).deallocate()
    }

    /// Counts one response.
    ///
    /// - Parameter cacheResult: how the cache took part; nil (label `none`) for pass-through requests.
    public func count(
        method: HTTPMethod,
        statusCode: Int,
        cacheResult: CacheResult?,
        protocol clientProtocol: ClientProtocol = .http1
    ) {
        let slot = Self.slot(method: method, statusCode: statusCode, cacheResult: cacheResult, protocol: clientProtocol)
        UnsafeAtomic<Int>(at: counts + slot).wrappingIncrement(ordering: .relaxed)
    }

    /// Counts a stored response sent in the form of `coding` (nil: identity), whose body was `savedBytes` smaller
    /// than identity's.
    public func countStoredForm(_ coding: ContentCoding?, savedBytes: Int) {
        let form: Int
        switch coding {
        case nil, .deflate?: form = 0
        case .br?: form = 1
        case .gzip?: form = 2
        }
        UnsafeAtomic<Int>(at: counts + Self.slotCount + form).wrappingIncrement(ordering: .relaxed)
        if savedBytes > 0 {
            UnsafeAtomic<Int>(at: counts + Self.savedBytesSlot).wrappingIncrement(by: savedBytes, ordering: .relaxed)
        }
    }

    /// The stored responses sent in each form of ``formLabels`` so far.
    func storedForms() -> [Int] {
        (0..<Self.formLabels.count).map { count(inSlot: Self.slotCount + $0) }
    }

    /// The body bytes the coded forms saved so far.
    var savedBytes: Int { count(inSlot: Self.savedBytesSlot) }

    /// Counts an HTTP/2 stream a client opened.
    func countStreamOpened() {
        UnsafeAtomic<Int>(at: counts + Self.streamsSlot).wrappingIncrement(ordering: .relaxed)
    }

    /// The HTTP/2 streams opened so far.
    var streamsOpened: Int { count(inSlot: Self.streamsSlot) }

    /// The responses counted in `slot` so far.
    func count(inSlot slot: Int) -> Int {
        UnsafeAtomic<Int>(at: counts + slot).load(ordering: .relaxed)
    }

    /// The slot of a response's labels.
    static func slot(
        method: HTTPMethod,
        statusCode: Int,
        cacheResult: CacheResult?,
        protocol clientProtocol: ClientProtocol
    ) -> Int {
        slot(row: row(method: method, protocol: clientProtocol), statusCode: statusCode, cacheResult: cacheResult)
    }

    /// The part of a slot a request's head decides (its method and protocol): what a request keeps until its
    /// response is counted, rather than the method itself, which is an enum with a `String` case to copy.
    static func row(method: HTTPMethod, protocol clientProtocol: ClientProtocol) -> Int {
        clientProtocol.rawValue * methodLabels.count + methodIndex(method)
    }

    private static func slot(row: Int, statusCode: Int, cacheResult: CacheResult?) -> Int {
        (row * statusClassLabels.count + statusClassIndex(statusCode)) * cacheLabels.count + cacheIndex(cacheResult)
    }

    /// Counts a response to a request of `row` (``row(method:protocol:)``).
    func count(row: Int, statusCode: Int, cacheResult: CacheResult?) {
        let slot = Self.slot(row: row, statusCode: statusCode, cacheResult: cacheResult)
        UnsafeAtomic<Int>(at: counts + slot).wrappingIncrement(ordering: .relaxed)
    }

    /// The label values of `slot`: method, status class, cache result, protocol.
    static func labels(
        ofSlot slot: Int
    ) -> (method: String, statusClass: String, cache: String, protocol: String) {
        let cache = slot % cacheLabels.count
        let rest = slot / cacheLabels.count
        let row = rest / statusClassLabels.count
        return (
            methodLabels[row % methodLabels.count], statusClassLabels[rest % statusClassLabels.count],
            cacheLabels[cache], protocolLabels[row / methodLabels.count]
        )
    }

    private static func methodIndex(_ method: HTTPMethod) -> Int {
        switch method {
        case .GET: 0
        case .HEAD: 1
        case .POST: 2
        case .PUT: 3
        case .PATCH: 4
        case .DELETE: 5
        case .OPTIONS: 6
        default: 7
        }
    }

    private static func statusClassIndex(_ code: Int) -> Int {
        (100...599).contains(code) ? code / 100 - 1 : 5
    }

    static func cacheIndex(_ result: CacheResult?) -> Int {
        switch result {
        case nil: 0
        case .hit: 1
        case .miss: 2
        case .bypass: 3
        case .stale: 4
        case .revalidated: 5
        }
    }
}
