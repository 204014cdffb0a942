import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Writes the responses the proxy composes itself: cached entries, fetched responses and errors.
///
/// Flushes once per response, after the end part, so a response costs one system call in the common case.
struct ResponseWriter {
    let context: ChannelHandlerContext
    let keepAlive: Bool
    let isHead: Bool
    /// Counts the response and writes its access-log line.
    var accounting: RequestAccounting?

    /// How a stored entry is presented to the client.
    struct EntryPresentation {
        var cacheResult: CacheResult
        /// The entry's age, sent on every response served from the cache.
        var age: Int64
        /// Answer 304 with no body: the client already has this representation.
        var notModified = false
        /// Beagle 1.x: `beagle-hash` and a plain `Cache-Control: max-age=N` with the freshness left.
        var beagleMaxAge: Int64?
    }

    /// Writes a stored entry.
    @discardableResult
    func write(_ entry: CachedResponse, _ presentation: EntryPresentation) -> EventLoopFuture<Void> {
        var headers: HTTPHeaders
        if presentation.notModified {
            headers = HTTPHeaders()
            for (name, value) in entry.headers
            where ConditionalRequest.notModifiedHeaderNames.contains(name.lowercased()) {
                headers.add(name: name, value: value)
            }
        } else {
            headers = entry.headers
            headers.reserveCapacity(headers.count + 5)
            headers.add(name: "Content-Length", value: String(entry.body.readableBytes))
        }
        if let maxAge = presentation.beagleMaxAge {
            headers.replaceOrAdd(name: "Cache-Control", value: "max-age=\(maxAge)")
            headers.replaceOrAdd(name: "beagle-hash", value: entry.contentHash)
        }
        headers.add(name: "Age", value: String(presentation.age))
        headers.add(name: "X-Cache", value: presentation.cacheResult.rawValue)
        return write(
            status: presentation.notModified ? .notModified : entry.status,
            headers: headers,
            body: presentation.notModified ? ByteBuffer() : entry.body,
            cacheResult: presentation.cacheResult
        )
    }

    /// Writes a backend response that was not stored.
    @discardableResult
    func write(_ response: UpstreamResponse, cacheStatus: CacheResult?) -> EventLoopFuture<Void> {
        var headers = UpstreamRequestBuilder.endToEndResponseHeaders(response.headers)
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.readableBytes))
        if let cacheStatus { headers.add(name: "X-Cache", value: cacheStatus.rawValue) }
        return write(status: response.status, headers: headers, body: response.body, cacheResult: cacheStatus)
    }

    /// Writes the JSON body of the error model.
    @discardableResult
    func write(_ error: ProxyError, cacheStatus: CacheResult? = nil) -> EventLoopFuture<Void> {
        let body = context.channel.allocator.buffer(string: error.jsonBody())
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        headers.add(name: "Cache-Control", value: "no-store")
        if let cacheStatus { headers.add(name: "X-Cache", value: cacheStatus.rawValue) }
        return write(status: error.status, headers: headers, body: body, cacheResult: cacheStatus)
    }

    @discardableResult
    private func write(
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        body: ByteBuffer,
        cacheResult: CacheResult?
    ) -> EventLoopFuture<Void> {
        accounting?.record(status: status, cacheResult: cacheResult, bytes: isHead ? 0 : body.readableBytes)
        var headers = headers
        if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: status, headers: headers)
        context.write(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
        if !isHead, body.readableBytes > 0 {
            context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(body))), promise: nil)
        }
        let written = context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)))
        if !keepAlive {
            let context = self.context
            written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
        return written
    }
}
