/// A flow-control window the proxy gave an HTTP/2 client (RFC 9113 section 5.2): the connection's, or one stream's.
/// The client may send `size` bytes before it hears more; the proxy gives the window back in WINDOW_UPDATE frames,
/// half a window at a time, so that a client sending steadily is not stopped and a few bytes do not cost a frame
/// each.
///
/// A stream's comes back as the proxy takes what arrived (``took(_:)``): a stream whose body's taker is full takes
/// nothing, and its client stops once the window is spent. The connection's comes back as it runs low
/// (``refill(left:)``), whatever the frames were for: a stream holds at most its own window, and DATA for a stream
/// already closed counts against the connection's window too.
public struct HTTP2InboundWindow: Sendable, Equatable {
    /// The window the client was given: the initial window size of the connection's SETTINGS.
    public let size: Int
    /// Taken since the last WINDOW_UPDATE.
    public private(set) var takenSinceUpdate = 0

    public init(size: Int = 65_535) {
        self.size = size
    }

    /// `bytes` (a DATA frame's flow-controlled length: its data and padding) were taken. Returns the increment of the
    /// WINDOW_UPDATE to send now, or nil while less than half the window was taken since the last.
    public mutating func took(_ bytes: Int) -> Int? {
        takenSinceUpdate += bytes
        guard takenSinceUpdate >= size / 2, takenSinceUpdate > 0 else { return nil }
        defer { takenSinceUpdate = 0 }
        return takenSinceUpdate
    }

    /// The increment that fills the window again when only `left` bytes of it remain (as `NIOHTTP2Handler` reports
    /// them), or nil while more than half remains.
    public func refill(left: Int) -> Int? {
        guard left <= size / 2 else { return nil }
        return size - left
    }
}
