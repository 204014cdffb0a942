import NIOPosix
import SDUIProxyCore

/// Each thread's ``JSONScanStorage``, which the component scans of the fills made on it reuse: a miss then makes and
/// frees none of a scan's arrays (about 700 instructions a miss, run AU in `Benchmarks/HISTORY.md`). A fill is
/// processed on its exchange's event loop, so one storage a thread serves its fills one after the other.
enum ThreadScanStorage {
    /// Runs `body` with this thread's storage. `body` must not reach for the storage again: a scan does not call out,
    /// and should it ever, the run-time exclusivity check on the box's storage stops the second access.
    static func withStorage<Result, Failure: Error>(
        _ body: (inout JSONScanStorage) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try body(&boxes.currentValue(orMake: Box.init).storage)
    }

    /// `@unchecked Sendable` for the thread-specific variable that holds it: only the thread that made it reaches
    /// it there.
    private final class Box: @unchecked Sendable {
        var storage = JSONScanStorage()
    }

    private static let boxes = ThreadSpecificVariable<Box>()
}
