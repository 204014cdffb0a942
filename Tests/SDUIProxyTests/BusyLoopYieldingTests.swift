import NIOCore
import NIOEmbedded
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

#if canImport(Glibc)
import Glibc
#endif

// The C library's affinity calls, which Glibc's module map leaves out (they need _GNU_SOURCE); named apart from
// them so that a Glibc that does export them does not make the calls ambiguous.
@_silgen_name("sched_getaffinity")
private func getAffinity(_ pid: Int32, _ size: Int, _ mask: UnsafeMutableRawPointer) -> Int32
@_silgen_name("sched_setaffinity")
private func setAffinity(_ pid: Int32, _ size: Int, _ mask: UnsafeRawPointer) -> Int32

// One test at a time: each pins spinning loops to the same core, and four loops sharing it would each run too
// little of a window to be busy.
@Suite("Busy event loops let the threads waiting for their core run (eventLoops)", .serialized)
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

    @Test(
        "on a real event loop, a loop kept busy offers its core where answers are flushed, and one that mostly sleeps does not"
    )
    func realLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let yielding = BusyLoopYielding(group: group, yieldAfter: .milliseconds(1))
        let loop = group.next()
        let yielder = try #require(yielding.yielder(for: loop))
        #expect(yielding.yielder(for: EmbeddedEventLoop()) == nil)

        // Short answers 2 ms apart: each window is mostly sleep.
        for _ in 0..<20 {
            try await loop.scheduleTask(in: .milliseconds(2)) {
                Self.spin(for: .microseconds(20))
                yielder.answersFlushed()
            }.futureResult.get()
        }
        // The window's end is a task of its own, which runs before this one.
        try await loop.submit {}.get()
        #expect(yielding.yieldCallCount == 0)

        let offered = try await Self.keepBusy([loop], yielding: yielding) { yielding.yieldCallCount > 0 }
        #expect(offered)
        try await group.shutdownGracefully()
    }

    @Test("a window ends in at most one yield, however many connections flush in the turn that closes it")
    func oneOfferAWindow() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let yielding = BusyLoopYielding(group: group, yieldAfter: .milliseconds(1))
        let loop = group.next()
        let yielder = try #require(yielding.yielder(for: loop))
        // Each turn is 2 ms of work, then a hundred connections flushing: whether the turns yield depends on how
        // much of the core the machine gives the loop, but never more than once a turn, and never in the first,
        // whose window runs from the loop's start.
        let turns = 20
        for _ in 0..<turns {
            try await loop.scheduleTask(in: .microseconds(50)) {
                Self.spin(for: .milliseconds(2))
                for _ in 0..<100 { yielder.answersFlushed() }
            }.futureResult.get()
        }
        try await loop.submit {}.get()
        #expect(yielding.yieldCallCount < turns)
        try await group.shutdownGracefully()
    }

    @Test("two busy loops on one core let each other run, and those yields are counted")
    func sharedCore() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let yielding = BusyLoopYielding(group: group, yieldAfter: .milliseconds(1))
        let loops = Array(group.makeIterator())
        // Alone on its core, a loop that offers it is not counted.
        _ = try await Self.keepBusy([loops[0]], yielding: yielding) { yielding.yieldCallCount > 0 }
        let alone = yielding.yieldCount
        for loop in loops { #expect(try await loop.submit { Self.pinToOneCPU() }.get()) }

        let gaveWay = try await Self.keepBusy(loops, yielding: yielding) { yielding.yieldCount > alone }
        #expect(gaveWay)
        try await group.shutdownGracefully()
    }

    @Test(
        "the proxy's own loops follow eventLoops.count, their connections' answers offer the cores, and the yields are counted in /metrics",
        arguments: [false, true]
    )
    func proxyLoops(http2: Bool) async throws {
        try await ProxyHarness.run(configure: {
            $0.eventLoops.count = 2
            $0.eventLoops.yieldAfter = .milliseconds(1)
        }) { proxy async throws in
            let loops = Array(proxy.server.eventLoopGroup.makeIterator())
            #expect(loops.count == 2)
            for loop in loops { #expect(try await loop.submit { Self.pinToOneCPU() }.get()) }
            // Nothing but the connections tells the proxy's loops when answers are flushed: the busy turns alone
            // offer nothing, the requests sent meanwhile do.
            let yielded = try await Self.keepBusy(
                loops,
                yielding: nil,
                traffic: { try await Self.requests(to: proxy, http2: http2) }
            ) {
                let metrics = try await proxy.admin("/metrics").body
                return Self.yields(in: metrics).map { $0 > 0 } ?? false
            }
            #expect(yielded)
        }
    }

    @Test("with eventLoops.yieldAfter 0 a busy loop never yields")
    func yieldingOff() async throws {
        try await ProxyHarness.run(configure: {
            $0.eventLoops.count = 2
            $0.eventLoops.yieldAfter = .zero
        }) { proxy async throws in
            #expect(proxy.server.ownEventLoops?.yielding == nil)
            let loops = Array(proxy.server.eventLoopGroup.makeIterator())
            for loop in loops { #expect(try await loop.submit { Self.pinToOneCPU() }.get()) }
            _ = try await Self.keepBusy(
                loops,
                yielding: nil,
                traffic: { try await Self.requests(to: proxy, http2: false) }
            ) { true }
            let metrics = try await proxy.admin("/metrics").body
            #expect(Self.yields(in: metrics) == 0)
        }
    }

    /// Runs 2 ms of work at a time on each of `loops`, each in a turn of the loop of its own that ends as a
    /// connection's flushed answers do (`yielding`'s yielder told of it), with `traffic` sent meanwhile, until
    /// `condition` holds or 10 s have passed (a machine busy with other tests may not give a loop three quarters
    /// of a window).
    private static func keepBusy(
        _ loops: [any EventLoop],
        yielding: BusyLoopYielding?,
        traffic: @escaping @Sendable () async throws -> Void = {},
        until condition: () async throws -> Bool
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for loop in loops {
                    let yielder = yielding?.yielder(for: loop)
                    group.addTask { try await busyTurns(on: loop, count: 5, yielder: yielder) }
                }
                group.addTask { try await traffic() }
                try await group.waitForAll()
            }
            if try await condition() { return true }
        }
        return try await condition()
    }

    private static func busyTurns(on loop: any EventLoop, count: Int, yielder: BusyLoopYielder?) async throws {
        let done = loop.makePromise(of: Void.self)
        busyTurns(on: loop, count: count, yielder: yielder, then: done)
        try await done.futureResult.get()
    }

    /// Each turn is scheduled by the one before, 50 µs ahead, so the loop sleeps briefly between them: every
    /// turn ends a tick of the loop.
    private static func busyTurns(
        on loop: any EventLoop,
        count: Int,
        yielder: BusyLoopYielder?,
        then done: EventLoopPromise<Void>
    ) {
        loop.scheduleTask(in: .microseconds(50)) {
            spin(for: .milliseconds(2))
            yielder?.answersFlushed()
            if count > 1 { busyTurns(on: loop, count: count - 1, yielder: yielder, then: done) } else { done.succeed() }
        }
    }

    /// Requests from eight clients at once, each sending four in turn: enough that each loop answers one as soon
    /// as a busy turn ends, which is where a window is judged.
    private static func requests(to proxy: ProxyHarness, http2: Bool) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in 0..<8 {
                group.addTask { for index in 0..<4 { try await request(client * 4 + index, to: proxy, http2: http2) } }
            }
            try await group.waitForAll()
        }
    }

    /// A request for a screen on a connection of its own (which the proxy gives the next of its loops), answered
    /// before it returns: over HTTP/1.1, or over HTTP/2 by prior knowledge.
    private static func request(_ index: Int, to proxy: ProxyHarness, http2: Bool) async throws {
        let client = try await RawConnection(port: proxy.server.publicPort)
        if http2 {
            let received = try await client.http2Get("/screens/busy-\(index)")
            #expect(HTTP2Wire.frames(in: received).contains { $0.stream == 1 })
        } else {
            try await client.send("GET /screens/busy-\(index) HTTP/1.1\r\nHost: localhost\r\n\r\n")
            let response = try await client.readResponse()
            #expect(response?.head.hasPrefix("HTTP/1.1 200") == true)
        }
        await client.close()
    }

    /// Moves the calling thread onto one core, the first the process may use, so that two loops share it.
    private static func pinToOneCPU() -> Bool {
        #if os(Linux)
        var set = cpu_set_t()
        guard getAffinity(0, MemoryLayout<cpu_set_t>.size, &set) == 0 else { return false }
        let found = withUnsafeMutableBytes(of: &set) { bytes -> Bool in
            guard let index = bytes.firstIndex(where: { $0 != 0 }) else { return false }
            let bit = bytes[index].trailingZeroBitCount
            for byte in bytes.indices { bytes[byte] = 0 }
            bytes[index] = 1 << bit
            return true
        }
        return found && setAffinity(0, MemoryLayout<cpu_set_t>.size, &set) == 0
        #else
        return false
        #endif
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
