import NIOCore

/// Sits under `NIOHTTP2Handler` on an HTTP/2 connection and turns the flushes of one turn of the loop into one.
///
/// Each stream answers in a task of its own (``HTTP2Stream`` routes a request once the frames read with it
/// are handled), and each answer ends with a flush. Passed down as they come, a client with 16 streams in flight
/// cost the proxy one TLS record and one `writev` per response: 20,000 writes for 20,000 hits, where nginx writes
/// what a read's requests produced at once. Here the first flush of a turn is held in a task queued behind the
/// streams' tasks already waiting, and that task flushes once for all of them. A close flushes what is held first,
/// so that an answer written before it is not lost.
///
/// Passing the held flush down is where the connection has flushed what a turn read from it produced, so that is
/// where it tells its loop's ``BusyLoopYielder``.
final class HTTP2FlushCoalescer: ChannelOutboundHandler {
    typealias OutboundIn = Any

    /// A flush is held, and a task on the loop will pass it down.
    private var flushHeld = false
    /// The loop's yielder; nil when the loops never yield.
    private let yielder: BusyLoopYielder?

    init(yielder: BusyLoopYielder? = nil) {
        self.yielder = yielder
    }

    func flush(context: ChannelHandlerContext) {
        guard !flushHeld else { return }
        flushHeld = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (coalescer, context) = loopBound.value
            coalescer.passHeldFlush(context: context)
        }
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        passHeldFlush(context: context)
        context.close(mode: mode, promise: promise)
    }

    private func passHeldFlush(context: ChannelHandlerContext) {
        guard flushHeld else { return }
        flushHeld = false
        context.flush()
        yielder?.answersFlushed()
    }
}
