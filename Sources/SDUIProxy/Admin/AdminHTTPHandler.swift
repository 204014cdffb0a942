import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Answers requests on the admin listener, which never shares a port with public traffic.
final class AdminHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOHTTPServerRequestFull
    typealias OutboundOut = HTTPServerResponsePart

    private let router: AdminRouter
    private let logger: Logger

    private let authorization: AdminAuthorization

    init(router: AdminRouter, authorization: AdminAuthorization, logger: Logger) {
        self.router = router
        self.authorization = authorization
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let full = unwrapInboundIn(data)
        let keepAlive = full.head.keepsConnectionOpen
        let response: EventLoopFuture<AdminResponse>
        // ``AdminGate`` refuses a request without the token on its head; checked again here all the same.
        if let request = Self.adminRequest(from: full) {
            response =
                authorization.isAuthorized(request.headers, path: request.path)
                ? router.respond(to: request, on: context.eventLoop)
                : context.eventLoop.makeSucceededFuture(AdminAuthorization.unauthorizedResponse(for: request.path))
        } else {
            response = context.eventLoop.makeSucceededFuture(
                AdminResponse(ProxyError(.badRequest, "the request target must be a path starting with /"))
            )
        }
        let logger = self.logger
        response.hop(to: context.eventLoop).assumeIsolated().whenComplete { result in
            let answer: AdminResponse
            switch result {
            case .success(let value): answer = value
            case .failure(let error):
                logger.error("admin endpoint failed", metadata: ["path": "\(full.head.uri)", "error": "\(error)"])
                answer = AdminResponse(
                    error as? ProxyError ?? ProxyError(.internalError, "the admin endpoint failed", detail: "\(error)")
                )
            }
            Self.write(answer, isHead: full.head.method.isHEAD, keepAlive: keepAlive, context: context)
        }
    }

    /// Writes `answer` as a whole response, and closes the connection after it unless `keepAlive`.
    static func write(_ answer: AdminResponse, isHead: Bool, keepAlive: Bool, context: ChannelHandlerContext) {
        let body = context.channel.allocator.buffer(string: answer.json)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: answer.contentType)
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        headers.add(name: "Cache-Control", value: "no-store")
        for (name, value) in answer.headers { headers.add(name: name, value: value) }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: answer.status, headers: headers)
        context.write(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
        if !isHead { context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(body))), promise: nil) }
        let written = context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)))
        if !keepAlive { written.assumeIsolated().whenComplete { _ in context.closeAfterAnswer() } }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("admin connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    private static func adminRequest(from full: NIOHTTPServerRequestFull) -> AdminRequest? {
        let uri = full.head.uri
        guard uri.hasPrefix("/") else { return nil }
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        guard let query = parts.count == 2 ? queryParameters(parts[1]) : [:] else { return nil }
        return AdminRequest(
            method: full.head.method,
            path: String(parts[0]),
            query: query,
            rawQuery: parts.count == 2 ? String(parts[1]) : nil,
            headers: full.head.headers,
            body: full.body
        )
    }

    /// The parameters of a query (after the `?`), percent-decoded; a name that repeats keeps its first value. Nil
    /// when a name or value is malformed.
    static func queryParameters(_ query: Substring) -> [String: String]? {
        var parameters: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let nameValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecoded(nameValue[0]) else { return nil }
            let value = nameValue.count == 2 ? percentDecoded(nameValue[1]) : ""
            guard let value else { return nil }
            if parameters[name] == nil { parameters[name] = value }
        }
        return parameters
    }

    /// Decodes `%XX` and, unless `plusIsSpace` is false, `+` (as a space); nil for a malformed escape or invalid
    /// UTF-8.
    static func percentDecoded(_ text: Substring, plusIsSpace: Bool = true) -> String? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next(), let low = iterator.next(),
                    let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
            } else if byte == UInt8(ascii: "+"), plusIsSpace {
                bytes.append(UInt8(ascii: " "))
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

extension AdminHTTPHandler: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Without the token: see ``AdminAuthorization``'s description.
    var description: String { "AdminHTTPHandler(authorization: \(authorization))" }

    var debugDescription: String { description }

    var customMirror: Mirror {
        Mirror(self, children: ["authorization": authorization], displayStyle: .class)
    }
}
