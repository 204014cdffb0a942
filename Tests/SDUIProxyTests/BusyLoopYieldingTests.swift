import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Busy event loops let the threads waiting for their core run (eventLoops)")
struct BusyLoopYieldingTests {
    private static let millisecond: Int64 = 1_000_000

    @Test("a loop yields when it ran for three quarters of a window, and not when it paused or waited")
    func policy() {
        var policy = BusyLoopYieldPolicy(yieldAfter: Self.millisecond)
        // The first window runs from the loop's start (time 0), long before: whatever it did, it is not busy.
        #expect(policy.isDue(now: 50 * Self.millisecond))
        var yields = policy.closeWindow(now: 50 * Self.millisecond, cpuTime: 2 * Self.millisecond)
        #expect(!yields)

        // Within the window nothing is decided.
        #expect(!policy.isDue(now: 50 * Self.millisecond + Self.millisecond / 2))

        // Ran 0.8 ms of 1 ms: yield.
        #expect(policy.isDue(now: 51 * Self.millisecond))
        yields = policy.closeWindow(now: 51 * Self.millisecond, cpuTime: 2 * Self.millisecond + 800_000)
        #expect(yields)

        // Ran 0.7 ms of 1 ms (it paused for work, or waited for its core): no yield.
        yields = policy.closeWindow(now: 52 * Self.millisecond, cpuTime: 3 * Self.millisecond + 500_000)
        #expect(!yields)

        // A tick that ends late makes a longer window: 3 ms of 4 ms is three quarters.
        yields = policy.closeWindow(now: 56 * Self.millisecond, cpuTime: 6 * Self.millisecond + 500_000)
        #expect(yields)
    }

    @Test("on a real event loop, a loop kept busy yields and one that mostly sleeps does not")
    func realLoop() async throws {
        let yielding = BusyLoopYielding(yieldAfter: .milliseconds(1))
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1, metricsDelegate: yielding)
        let loop = group.next()

        // Short tasks 2 ms apart: each window is mostly sleep.
        for _ in 0..<20 {
            try await loop.scheduleTask(in: .milliseconds(2)) { Self.spin(for: .microseconds(20)) }.futureResult.get()
        }
        #expect(yielding.yieldCount == 0)

        let yielded = try await Self.keepBusy(loop) { yielding.yieldCount > 0 }
        #expect(yielded)
        try await group.shutdownGracefully()
    }

    @Test("the proxy's own loops follow eventLoops.count, and their yields are counted in /metrics")
    func proxyLoops() async throws {
        try await ProxyHarness.run(configure: {
            $0.eventLoops.count = 1
            $0.eventLoops.yieldAfter = .milliseconds(1)
        }) { proxy async throws in
            let loops = Array(proxy.server.eventLoopGroup.makeIterator())
            #expect(loops.count == 1)
            let yielded = try await Self.keepBusy(loops[0]) {
                let metrics = try await proxy.admin("/metrics").body
                return Self.yields(in: metrics).map { $0 > 0 } ?? false
            }
            #expect(yielded)
        }
    }

    @Test("with eventLoops.yieldAfter 0 a busy loop never yields")
    func yieldingOff() async throws {
        try await ProxyHarness.run(configure: {
            $0.eventLoops.count = 1
            $0.eventLoops.yieldAfter = .zero
        }) { proxy async throws in
            let loop = proxy.server.eventLoopGroup.next()
            try await Self.busyTurns(on: loop, count: 10)
            let metrics = try await proxy.admin("/metrics").body
            #expect(Self.yields(in: metrics) == 0)
        }
    }

    /// Runs 2 ms of work at a time on `loop`, each in a turn of the loop of its own, until `condition` holds or
    /// 10 s have passed (a machine busy with other tests may not give the loop three quarters of a window).
    private static func keepBusy(
        _ loop: any EventLoop,
        until condition: () async throws -> Bool
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            try await busyTurns(on: loop, count: 5)
            if try await condition() { return true }
        }
        return try await condition()
    }

    private static func busyTurns(on loop: any EventLoop, count: Int) async throws {
        let done = loop.makePromise(of: Void.self)
        busyTurns(on: loop, count: count, then: done)
        try await done.futureResult.get()
    }

    /// Each turn is scheduled by the one before, 50 µs ahead, so the loop sleeps briefly between them: every
    /// turn ends a tick of the loop.
    private static func busyTurns(on loop: any EventLoop, count: Int, then done: EventLoopPromise<Void>) {
        loop.scheduleTask(in: .microseconds(50)) {
            spin(for: .milliseconds(2))
            if count > 1 { busyTurns(on: loop, count: count - 1, then: done) } else { done.succeed() }
        }
    }

    private static func spin(for time: TimeAmount) {
        let end = NIODeadline.now() + time
        while NIODeadline.now() < end {}
    }

    private static func yields(in metrics: String) -> Int? {
        metrics.split(separator: "\n").first { $0.hasPrefix("sdui_event_loop_yields_total ") }
            .flatMap { Int($0.split(separator: " ").last ?? "") }
    }
}
