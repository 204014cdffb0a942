import NIOCore

/// One `Value` for each loop of a group, made up front, so that code running on a loop finds its loop's
/// without a lock or a reference count that both loops write.
///
/// For state a loop keeps to itself: each value is handed to its loop's box and reachable only on that loop.
struct PerEventLoop<Value: AnyObject>: Sendable {
    private let byLoop: EventLoopTable<NIOLoopBoundBox<Value>>
    private let makeValue: @Sendable () -> Value

    /// Callable off the loops.
    init(group: any EventLoopGroup, makeValue: @escaping @Sendable () -> Value) {
        byLoop = EventLoopTable(group: group) { eventLoop in
            .makeBoxSendingValue(makeValue(), eventLoop: eventLoop)
        }
        self.makeValue = makeValue
    }

    /// The value of `eventLoop`; call it on that loop. A loop outside the group gets a new value each time.
    func value(on eventLoop: any EventLoop) -> Value {
        byLoop[eventLoop]?.value ?? makeValue()
    }
}
