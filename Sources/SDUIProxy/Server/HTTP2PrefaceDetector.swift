import NIOCore

/// The first handler of a clear-text connection when `listen.http2` is on: it reads until the first 24 bytes tell
/// whether the client speaks HTTP/2 with prior knowledge (RFC 9113 section 3.3: they are the connection preface)
/// or HTTP/1.1, hands the connection to that protocol's handlers with what it read, and leaves the pipeline.
///
/// An HTTP/1.1 request line starts differently from the preface within its first bytes (`PRI * HTTP/2.0` is not a
/// request the proxy answers), so most connections are decided by their first byte, and none waits for more
/// bytes than its first read unless it sent fewer than the preface's length, all of them the preface's. A client that
/// stops there is closed by the connection's ``ConnectionSetupDeadline``.
final class HTTP2PrefaceDetector: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// The client connection preface.
    static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    /// What the connection turned out to speak.
    enum Spoken {
        case http1
        case http2
    }

    /// Sets the connection up for what it speaks, after this handler, on its loop.
    private let configure: (ChannelHandlerContext, Spoken) throws -> Void
    private var received: ByteBuffer?

    init(configure: @escaping (ChannelHandlerContext, Spoken) throws -> Void) {
        self.configure = configure
    }

    /// What `bytes`, the start of a connection, tell: nil while they are all the preface's and fewer.
    static func decide(_ bytes: ByteBuffer) -> Spoken? {
        let count = min(bytes.readableBytes, preface.count)
        let matches = bytes.withUnsafeReadableBytes { start in
            zip(start.prefix(count), preface.prefix(count)).allSatisfy { $0 == $1 }
        }
        if !matches { return .http1 }
        return count == preface.count ? .http2 : nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        if var earlier = received {
            received = nil
            earlier.writeBuffer(&bytes)
            bytes = earlier
        }
        guard let decided = Self.decide(bytes) else {
            received = bytes
            return
        }
        do {
            try configure(context, decided)
        } catch {
            context.fireErrorCaught(error)
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(wrapInboundOut(bytes))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        received = nil
        context.fireChannelInactive()
    }
}
