import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

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
        let forms = compressor(pool: nil).encode(json)
        #expect(forms.map(\.coding) == [.br, .gzip])
        for form in forms {
            #expect(form.body.readableBytes < json.readableBytes)
            #expect(try ContentCoder.decode(form.body, from: form.coding, maxBytes: 1 << 20) == json)
        }
        // Random bytes do not get smaller.
        var generator = SystemRandomNumberGenerator()
        let noise = ByteBuffer(bytes: (0..<512).map { _ in UInt8.random(in: 0...255, using: &generator) })
        #expect(compressor(pool: nil).encode(noise).isEmpty)
        #expect(compressor({ $0.encodings = [.gzip] }, pool: nil).encode(json).map(\.coding) == [.gzip])
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
}
