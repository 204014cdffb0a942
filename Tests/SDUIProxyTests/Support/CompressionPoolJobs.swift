import NIOCore
import NIOPosix

@testable import SDUIProxy

extension CompressionPool {
    /// Runs `work` on the pool, as a fill's compression does, for a test that waits for its result or holds the
    /// pool busy: completes on `eventLoop`; nil, and `work` not run, when the pool is full.
    func run<Value: Sendable>(
        on eventLoop: any EventLoop,
        _ work: @escaping @Sendable () -> Value
    ) -> EventLoopFuture<Value>? {
        let promise = eventLoop.makePromise(of: Value.self)
        let started = submit(work) { value in
            if let value { promise.succeed(value) } else { promise.fail(NIOThreadPoolError.ThreadPoolInactive()) }
        }
        guard started else {
            // Refused: the promise is let go fulfilled, as NIO requires of every promise.
            promise.fail(NIOThreadPoolError.ThreadPoolInactive())
            return nil
        }
        return promise.futureResult
    }
}
