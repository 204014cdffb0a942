import NIOCore

/// A forwarded request's body, as the client connection hands it to the ``PassThroughResponder``.
enum ForwardedRequestBody {
    /// The request has none.
    case none
    /// Streamed to the backend as it arrives (a route with `stream: true`), on a connection taken when the head
    /// arrived.
    case streamed(RequestBodyStream)
    /// Read whole, in memory: sent with the head, with its length.
    case whole(ByteBuffer)
    /// Read whole into a temporary file, `length` bytes: streamed from it, with its length. The file is removed
    /// once the exchange has ended, however it ended.
    case spooled(RequestSpoolFile, length: Int)
}
