/// Decides when an event loop has kept its core long enough to let others run: the loop's time is cut into
/// windows of `yieldAfter`, and at the end of each the loop yields if its thread ran for at least three quarters
/// of it. A loop that paused for lack of work, or waited for its core, has already let others run.
struct BusyLoopYieldPolicy {
    let yieldAfter: Int64
    private var windowStart: Int64 = 0
    private var windowCPUStart: Int64 = 0

    init(yieldAfter: Int64) {
        self.yieldAfter = yieldAfter
    }

    /// Whether the window is over, at `now` (monotonic nanoseconds); until then nothing else is asked.
    func isDue(now: Int64) -> Bool {
        now - windowStart >= yieldAfter
    }

    /// Ends the window and starts the next; returns whether the loop should yield: whether the thread ran
    /// (`cpuTime`, its CPU clock) for at least three quarters of the window.
    mutating func closeWindow(now: Int64, cpuTime: Int64) -> Bool {
        let elapsed = now - windowStart
        let ran = cpuTime - windowCPUStart
        startWindow(now: now, cpuTime: cpuTime)
        return ran * 4 >= elapsed * 3
    }

    mutating func startWindow(now: Int64, cpuTime: Int64) {
        windowStart = now
        windowCPUStart = cpuTime
    }
}
