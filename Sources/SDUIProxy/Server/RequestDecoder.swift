import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Turns a public connection's bytes into request parts with ``HTTPRequestParser``; NIO's
/// `ByteToMessageHandler` around it keeps the bytes of a request that has not fully arrived.
///
/// A parser failure reaches ``PublicHTTPHandler`` as an error, which answers it and closes the connection.
struct RequestDecoder: ByteToMessageDecoder {
    typealias InboundOut = HTTPServerRequestPart

    private var parser: HTTPRequestParser

    /// - Parameter limits: a head may be as long as the URL and header limits together (plus slack for the
    ///   request line and whitespace), so ``RequestAdmission`` sees every head it could accept and answers
    ///   the others with its own 414 or 431.
    init(limits: ProxyConfiguration.Limits) {
        parser = HTTPRequestParser(maximumHeadBytes: limits.maxURLBytes + limits.maxHeaderBytes + 1024)
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        while let part = try parser.next(from: &buffer) {
            context.fireChannelRead(wrapInboundOut(part))
        }
        return .needMoreData
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        _ = try decode(context: context, buffer: &buffer)
        if seenEOF { try parser.finish() }
        return .needMoreData
    }
}
