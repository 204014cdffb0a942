import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

/// What a cached response costs beyond its bytes: the cache holds hundreds of thousands of them, and every
/// byte of an entry's object is paid once per entry (`Benchmarks/run.sh`'s `memory` scenario measures the sum).
@Suite("An entry's footprint")
struct EntryFootprintTests {
    private static func entry(headers: HTTPHeaders, variant: String = "") -> CachedResponse {
        var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        if !variant.isEmpty {
            metadata.varyNames = ["accept-language"]
            metadata.variant = variant
        }
        return CachedResponse(
            status: .ok,
            headers: headers,
            body: ByteBuffer(repeating: UInt8(ascii: "a"), count: 2_000),
            metadata: metadata
        )
    }

    /// The bytes the allocator gave an object, its header included (glibc's `malloc_usable_size`, which its
    /// module map leaves out; Darwin's `malloc_size`).
    private static func allocatedBytes(_ object: AnyObject) -> Int {
        withExtendedLifetime(object) { allocationSize(Unmanaged.passUnretained(object).toOpaque()) }
    }

    @Test("a form inline in its entry takes 32 bytes, and the entry's object at most 128 with its header")
    func objectSizes() {
        #expect(MemoryLayout<StoredForm>.size <= 32)
        // Every node of the cache's store holds a slot: the parts a few keys hold are boxed, not inline.
        #expect(MemoryLayout<ResponseCache.Slot>.size <= 8)
        let plain = Self.entry(headers: ["Content-Type": "application/json", "Cache-Control": "max-age=60"])
        #expect(Self.allocatedBytes(plain) <= 128)
    }

    @Test("a node of the cache's store takes 32 bytes: its key is one reference, not two strings and a hash")
    func nodeSize() {
        #expect(MemoryLayout<StoredCacheKey>.size == 8)
        #expect(LRUStore<StoredCacheKey, ResponseCache.Slot>.nodeStride <= 32)
    }

    @Test("what most entries lack is not held inline: a Vary variant and tags are read back as stored")
    func varianceOutOfLine() {
        let plain = Self.entry(headers: ["Content-Type": "application/json"])
        #expect(plain.varyNames.isEmpty && plain.variant.isEmpty && plain.tags.isEmpty)
        let varied = Self.entry(headers: ["Surrogate-Key": "home screens", "Vary": "Accept-Language"], variant: "de")
        #expect(varied.varyNames == ["accept-language"])
        #expect(varied.variant == "de")
        #expect(varied.tags == ["home", "screens"])
        // The copies an entry makes keep them.
        let purged = varied.softPurged(at: .now())
        #expect(purged?.variant == "de" && purged?.tags == ["home", "screens"])
    }

    @Test("a large body's length and bytes are read from its buffer, a small one's from behind the head")
    func bodyLengths() {
        let small = Self.entry(headers: ["Content-Type": "application/json"])
        #expect(small.bodyLength == 2_000 && small.body.readableBytes == 2_000)
        let large = CachedResponse(
            status: .ok,
            headers: ["Content-Type": "application/json"],
            body: ByteBuffer(repeating: UInt8(ascii: "b"), count: CachedResponse.maximumExactBodyBytes + 1),
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
        #expect(large.bodyLength == CachedResponse.maximumExactBodyBytes + 1)
        #expect(large.identity.largeBody?.readableBytes == CachedResponse.maximumExactBodyBytes + 1)
        #expect(large.byteCost >= large.bodyLength + large.identity.encodedHeadCount(common: large.commonLines))
    }
}

#if canImport(Darwin)
@_silgen_name("malloc_size")
private func allocationSize(_ pointer: UnsafeMutableRawPointer) -> Int
#else
@_silgen_name("malloc_usable_size")
private func allocationSize(_ pointer: UnsafeMutableRawPointer) -> Int
#endif
