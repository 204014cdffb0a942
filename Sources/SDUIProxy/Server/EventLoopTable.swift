import NIOCore

/// One value for each loop of a group, found by the loop's identity: the identities sorted once, then searched
/// by halves.
///
/// Every miss finds its loop's upstream pool and its loop's prefetch state. A dictionary keyed by
/// `ObjectIdentifier` ran SipHash over the identity for each (about 200 instructions a lookup); a group's loops
/// are found in a few comparisons, and a table made once is only read.
struct EventLoopTable<Value> {
    /// The loops' identities in ascending order; `values` in the same order.
    private let loops: [ObjectIdentifier]
    private let values: [Value]

    /// A value for each loop of `group`, made by `makeValue` in the group's order.
    init<Failure: Error>(
        group: any EventLoopGroup,
        makeValue: (any EventLoop) throws(Failure) -> Value
    ) throws(Failure) {
        var entries: [(loop: ObjectIdentifier, value: Value)] = []
        for eventLoop in group.makeIterator() {
            entries.append((ObjectIdentifier(eventLoop), try makeValue(eventLoop)))
        }
        entries.sort { $0.loop < $1.loop }
        loops = entries.map(\.loop)
        values = entries.map(\.value)
    }

    /// The value made for `eventLoop`; nil for a loop outside the group.
    subscript(eventLoop: any EventLoop) -> Value? {
        let loop = ObjectIdentifier(eventLoop)
        var low = 0
        var high = loops.count
        while low < high {
            let middle = (low &+ high) &>> 1
            if loops[middle] < loop { low = middle &+ 1 } else { high = middle }
        }
        return low < loops.count && loops[low] == loop ? values[low] : nil
    }

    /// Every value, one for each loop.
    var allValues: [Value] { values }
}

extension EventLoopTable: Sendable where Value: Sendable {}
