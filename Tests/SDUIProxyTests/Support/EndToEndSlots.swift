import NIOCore

/// Bounds how many end-to-end tests (a proxy, its origin and its clients over loopback) run at once.
///
/// Swift Testing starts every test together; on a two-core machine hundreds of proxies starting at once left
/// each test's steps seconds apart, and tests whose backend or client deadlines are a few seconds long failed for
/// it. Waiting for a slot happens before a test's proxy exists, so no deadline of the test runs meanwhile. A test
/// already in a slot (a harness inside a harness) does not take another.
enum EndToEndSlots {
    /// How many run at once: enough to keep the cores busy while some tests wait on timers.
    static let width = max(4, 3 * System.coreCount)

    @TaskLocal private static var holdsSlot = false
    private static let gate = SlotGate(width: width)

    /// Runs `body` in a slot, waiting for one first unless this task holds one already.
    static func withSlot<Result>(_ body: () async throws -> Result) async throws -> Result {
        if holdsSlot { return try await body() }
        await gate.enter()
        do {
            let result = try await $holdsSlot.withValue(true) { try await body() }
            await gate.leave()
            return result
        } catch {
            await gate.leave()
            throw error
        }
    }
}

/// A counting gate: at most `width` holders, the others wait in arrival order.
private actor SlotGate {
    private let width: Int
    private var holders = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(width: Int) { self.width = width }

    func enter() async {
        if holders < width {
            holders += 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func leave() {
        if waiting.isEmpty {
            holders -= 1
        } else {
            // The slot passes straight to the first waiter.
            waiting.removeFirst().resume()
        }
    }
}
