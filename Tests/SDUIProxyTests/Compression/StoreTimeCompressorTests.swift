import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

extension StoreTimeCompressor {
    /// ``plan(for:bodyLength:)`` for a response whose one field is `Content-Type: contentType` (none for nil).
    fileprivate func plan(contentType: String?, bodyLength: Int) -> Plan {
        plan(for: HTTPFieldLines(HTTPHeaders(contentType.map { [("Content-Type", $0)] } ?? [])), bodyLength: bodyLength)
    }
}

/// What is compressed when, and the pool that compresses large bodies: bounded in the jobs it takes.
@Suite struct StoreTimeCompressorTests {
    private func compressor(
        _ configure: (inout CompressionConfiguration) -> Void = { _ in },
        pool: CompressionPool?
    )
        -> StoreTimeCompressor
    {
        var configuration = CompressionConfiguration()
        configure(&configuration)
        return StoreTimeCompressor(
            configuration: configuration,
            pool: pool,
            metrics: ProxyMetrics(),
            logger: Logger(label: "test")
        )
    }

    @Test("listed types at least minBytes long are compressed: on the pool, or before storing when there is none")
    func plans() {
        let pool = CompressionPool(numberOfThreads: 1)
        let compressing = compressor(pool: pool)
        #expect(compressing.plan(contentType: "application/json", bodyLength: 2_000) == .later)
        #expect(compressing.plan(contentType: "application/json", bodyLength: 256) == .later)
        #expect(compressing.plan(contentType: "application/json", bodyLength: 255) == .tooSmall)
        #expect(compressing.plan(contentType: "image/png", bodyLength: 2_000) == .identityOnly)
        #expect(compressing.plan(contentType: nil, bodyLength: 2_000) == .identityOnly)
        #expect(compressing.plan(contentType: "application/json", bodyLength: 1).variesByEncoding)
        #expect(!compressing.plan(contentType: "image/png", bodyLength: 2_000).variesByEncoding)
        let fields = HTTPFieldLines(["Content-Type": "Application/JSON; charset=utf-8"])
        #expect(compressing.plan(for: fields, bodyLength: 2_000) == .later)
        #expect(compressing.plan(for: HTTPFieldLines([:]), bodyLength: 2_000) == .identityOnly)
        #expect(compressor(pool: nil).plan(contentType: "text/html", bodyLength: 100_000) == .now)
        let off = compressor({ $0.encodings = [] }, pool: pool)
        #expect(off.plan(contentType: "application/json", bodyLength: 2_000) == .identityOnly)
        #expect(!off.plan(contentType: "application/json", bodyLength: 2_000).variesByEncoding)
    }

    @Test("each configured coding that makes the body smaller is kept; one that does not is left out")
    func encodedForms() throws {
        let json = ByteBuffer(string: String(repeating: #"{"_beagleComponent_":"beagle:text"},"#, count: 40))
        let forms = compressor(pool: nil).encode(json, in: [.br, .gzip])
        #expect(forms.map(\.coding) == [.br, .gzip])
        for form in forms {
            #expect(form.body.readableBytes < json.readableBytes)
            #expect(try ContentCoder.decode(form.body, from: form.coding, maxBytes: 1 << 20) == json)
        }
        // Random bytes do not get smaller.
        var generator = SystemRandomNumberGenerator()
        let noise = ByteBuffer(bytes: (0..<512).map { _ in UInt8.random(in: 0...255, using: &generator) })
        #expect(compressor(pool: nil).encode(noise, in: [.br, .gzip]).isEmpty)
        // Only the codings asked for, and among them only those configured.
        #expect(compressor(pool: nil).encode(json, in: [.gzip]).map(\.coding) == [.gzip])
        #expect(
            compressor({ $0.encodings = [.gzip] }, pool: nil).encode(json, in: [.br, .gzip]).map(\.coding) == [.gzip]
        )
        #expect(compressor({ $0.encodings = [.gzip] }, pool: nil).encode(json, in: [.br]).isEmpty)
    }

    /// A fill's request from a client whose headers are `headers`.
    private static func fill(
        _ headers: HTTPHeaders,
        replacing staleEntry: CachedResponse? = nil,
        preparesEveryCoding: Bool = false
    ) -> ComponentFetcher.Request {
        .homeScreen(clientHeaders: headers, replacing: staleEntry, preparesEveryCoding: preparesEveryCoding)
    }

    @Test("a fill makes the coding its client would be sent, none for a client that takes none; a prefetch all")
    func demandedCodings() {
        let compressing = compressor(pool: nil)
        #expect(compressing.demandedCodings(by: Self.fill([:])) == [])
        #expect(compressing.demandedCodings(by: Self.fill(["Accept-Encoding": "gzip, deflate, br"])) == [.br])
        #expect(compressing.demandedCodings(by: Self.fill(["Accept-Encoding": "gzip"])) == [.gzip])
        #expect(compressing.demandedCodings(by: Self.fill(["Accept-Encoding": "br;q=0.5, gzip"])) == [.gzip])
        #expect(compressing.demandedCodings(by: Self.fill(["Accept-Encoding": "identity"])) == [])
        #expect(compressing.demandedCodings(by: Self.fill(["Accept-Encoding": "zstd"])) == [])
        // Only configured codings are made.
        let gzipOnly = compressor({ $0.encodings = [.gzip] }, pool: nil)
        #expect(gzipOnly.demandedCodings(by: Self.fill(["Accept-Encoding": "br"])) == [])
        #expect(gzipOnly.demandedCodings(by: Self.fill(["Accept-Encoding": "br, gzip"])) == [.gzip])
        // A prefetch, and any fill when eager, makes every configured coding.
        #expect(compressing.demandedCodings(by: Self.fill([:], preparesEveryCoding: true)) == [.br, .gzip])
        #expect(gzipOnly.demandedCodings(by: Self.fill([:], preparesEveryCoding: true)) == [.gzip])
        #expect(compressor({ $0.eager = true }, pool: nil).demandedCodings(by: Self.fill([:])) == [.br, .gzip])
        // A refresh makes again what the entry it replaces was kept in, and what its own client takes.
        let stale = Self.awaitingEntry(ByteBuffer(string: "{}")).adding(
            [.init(coding: .gzip, body: ByteBuffer(string: "z"))],
            tried: [.gzip]
        )
        #expect(compressing.demandedCodings(by: Self.fill([:], replacing: stale)) == [.gzip])
        #expect(
            compressing.demandedCodings(by: Self.fill(["Accept-Encoding": "br"], replacing: stale)) == [.br, .gzip]
        )
        #expect(gzipOnly.demandedCodings(by: Self.fill([:], replacing: stale)) == [.gzip])
        #expect(
            compressor({ $0.encodings = [.br] }, pool: nil).demandedCodings(by: Self.fill([:], replacing: stale)) == []
        )
    }

    @Test("the pool refuses work past its bound until jobs finish, and runs it off the caller's loop")
    func boundedPool() async throws {
        let pool = CompressionPool(numberOfThreads: 1, maximumUnfinished: 2)
        pool.start()
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let release = ConditionLock(value: 0)
        let blockedJob = pool.run(on: loop) { () -> Bool in
            release.lock(whenValue: 1)
            release.unlock()
            return loop.inEventLoop
        }
        let blocked = try #require(blockedJob)
        let queuedJob = pool.run(on: loop) { 2 }
        let queued = try #require(queuedJob)
        #expect(pool.run(on: loop) { 3 } == nil)
        #expect(pool.refusedJobs == 1)
        release.lock()
        release.unlock(withValue: 1)
        #expect(try await blocked.get() == false)
        #expect(try await queued.get() == 2)
        // Both finished: room again. The counts go down as each job's future completes.
        let nextJob = pool.run(on: loop) { 4 }
        let next = try #require(nextJob)
        #expect(try await next.get() == 4)
        try await pool.shutdownGracefully()
    }

    @Test("a submitted job ends on the pool's thread, frees its room before it is told, and ends in nil unrun")
    func submittedJobs() async throws {
        let pool = CompressionPool(numberOfThreads: 1, maximumUnfinished: 1)
        pool.start()
        for round in 0..<3 {
            // One room only: when a job's end is told its room is free, so a job submitted from there is taken.
            let (value, onLoop, nextTaken) = await withCheckedContinuation {
                (ended: CheckedContinuation<(Int?, Bool, Bool), Never>) in
                let started = pool.submit({ round }) { value in
                    let onLoop = MultiThreadedEventLoopGroup.currentEventLoop != nil
                    let nextTaken = pool.submit({ () }) { _ in ended.resume(returning: (value, onLoop, true)) }
                    if !nextTaken { ended.resume(returning: (value, onLoop, false)) }
                }
                if !started { ended.resume(returning: (nil, true, false)) }
            }
            #expect(value == round && !onLoop && nextTaken)
        }
        #expect(pool.refusedJobs == 0)
        try await pool.shutdownGracefully()
        // A pool that has shut down runs nothing, and says so.
        let value = await withCheckedContinuation { (ended: CheckedContinuation<Int??, Never>) in
            let started = pool.submit({ 1 }) { ended.resume(returning: .some($0)) }
            if !started { ended.resume(returning: .none) }
        }
        #expect(value == .some(nil))
    }

    /// Starts a job with `start`, which is handed the job's `whenDone`, and waits for the job to end; false at once
    /// when `start` started none.
    private static func startedAndEnded(_ start: (@escaping @Sendable () -> Void) -> Bool) async -> Bool {
        await withCheckedContinuation { (ended: CheckedContinuation<Bool, Never>) in
            if !start({ ended.resume(returning: true) }) { ended.resume(returning: false) }
        }
    }

    /// An entry stored to be compressed after, as a fill stores it when there is a pool.
    private static func awaitingEntry(_ body: ByteBuffer) -> CachedResponse {
        var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 300)
        metadata.variesByEncoding = true
        metadata.pendingCodings = [.br, .gzip]
        return CachedResponse(
            status: .ok,
            headers: ["Content-Type": "application/json"],
            body: body,
            metadata: metadata
        )
    }

    @Test("a coding is made on the hit that asks for it, once at a time, the pool full or not; the others wait")
    func compressedOnHit() async throws {
        let pool = CompressionPool(numberOfThreads: 1, maximumUnfinished: 1)
        pool.start()
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let compressing = compressor(pool: pool)
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let key = CacheKey(target: "/screens/home", platform: "WEB")
        let entry = Self.awaitingEntry(
            ByteBuffer(string: String(repeating: #"{"_beagleComponent_":"beagle:text"},"#, count: 40))
        )
        cache.store(entry, for: key)

        // The pool is busy: the store-time compression is skipped, and so is a hit's while it stays busy.
        let release = ConditionLock(value: 0)
        let blockingJob = pool.run(on: loop) {
            release.lock(whenValue: 1)
            release.unlock()
        }
        let blocking = try #require(blockingJob)
        #expect(!compressing.compressLater(entry, in: [.br], for: key, in: cache))
        #expect(entry.pendingCodings == [.br, .gzip])
        #expect(!compressing.compressOnHit(entry, in: .gzip, for: key, in: cache))
        release.lock()
        release.unlock(withValue: 1)
        try await blocking.get()

        // Compressed once, whatever the hits that come while it is under way, in the coding asked for alone.
        let ran = await Self.startedAndEnded { whenDone in
            let started = compressing.compressOnHit(entry, in: .gzip, for: key, in: cache, whenDone: whenDone)
            #expect(!compressing.compressOnHit(entry, in: .br, for: key, in: cache))
            return started
        }
        #expect(ran)
        let stored = try #require(Self.stored(key, in: cache))
        #expect(stored !== entry && stored.codings == [.gzip] && stored.pendingCodings == [.br])
        #expect(stored.form(.gzip).bodyLength < stored.bodyLength)
        // The other coding, when a client asks for it.
        let ranAgain = await Self.startedAndEnded { whenDone in
            compressing.compressOnHit(stored, in: .br, for: key, in: cache, whenDone: whenDone)
        }
        #expect(ranAgain)
        let both = try #require(Self.stored(key, in: cache))
        #expect(both !== stored && both.codings == [.br, .gzip] && both.pendingCodings.isEmpty)
        #expect(both.form(.gzip).body == stored.form(.gzip).body)
        try await pool.shutdownGracefully()
    }

    private static func stored(_ key: CacheKey, in cache: ResponseCache) -> CachedResponse? {
        guard case .fresh(let stored) = cache.lookup(key, requestHeaders: [:], now: .now()) else { return nil }
        return stored
    }

    @Test("a coding that does not make the body smaller is tried once: the hits after it send nothing to the pool")
    func incompressibleTriedOnce() async throws {
        let pool = CompressionPool(numberOfThreads: 1)
        pool.start()
        let compressing = compressor(pool: pool)
        let cache = ResponseCache(maxBytes: 1 << 20, maxEntries: 100)
        let key = CacheKey(target: "/noise", platform: "WEB")
        var generator = SystemRandomNumberGenerator()
        let entry = Self.awaitingEntry(
            ByteBuffer(bytes: (0..<2_048).map { _ in UInt8.random(in: 0...255, using: &generator) })
        )
        cache.store(entry, for: key)
        let ran = await Self.startedAndEnded { whenDone in
            compressing.compressOnHit(entry, in: .gzip, for: key, in: cache, whenDone: whenDone)
        }
        #expect(ran)
        #expect(!compressing.compressOnHit(entry, in: .gzip, for: key, in: cache))
        // gzip is no longer pending; br, never asked for, still is.
        let stored = try #require(Self.stored(key, in: cache))
        #expect(stored !== entry && stored.codings.isEmpty && stored.pendingCodings == [.br])
        #expect(stored.negotiate(acceptEncoding: "gzip") == (nil, nil))
        let ranAgain = await Self.startedAndEnded { whenDone in
            compressing.compressOnHit(stored, in: .br, for: key, in: cache, whenDone: whenDone)
        }
        #expect(ranAgain)
        // Nothing left to try: a hit neither negotiates nor sends the entry again.
        let tried = try #require(Self.stored(key, in: cache))
        #expect(tried !== stored && tried.codings.isEmpty && tried.pendingCodings.isEmpty)
        #expect(tried.negotiate(acceptEncoding: "br, gzip") == (nil, nil))
        #expect(!compressing.compressOnHit(stored, in: .br, for: key, in: cache))
        try await pool.shutdownGracefully()
    }
}
