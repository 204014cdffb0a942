import NIOCore
import NIOHTTP1
import SDUIProxyCore

// MARK: - Writing responses

/// A response on an HTTP/2 stream: a head (HEADERS), body parts (DATA) and an end (END_STREAM). No framing and
/// no `Connection`: the stream is the response's frame. A stored entry's fields are read from its stored lines
/// as name and value (split at known separators, never parsed as HTTP/1.1) into the head the codec encodes
/// with HPACK.
extension HTTP2StreamHandler: ResponseSink {
    var eventLoop: any EventLoop { loop }

    var client: ClientPeer {
        if let peer { return peer }
        // The stream's parent is the connection; its peer is the client.
        let remote = context?.channel.parent?.remoteAddress ?? context?.channel.remoteAddress
        let peer = ClientPeer(remote: remote, trustedProxies: proxy.configuration.trustedProxies, isSecure: isSecure)
        self.peer = peer
        return peer
    }

    func writeInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {
        guard let context, !response.headWritten else { return }
        let head = HTTPResponseHead(
            version: .http2,
            status: status,
            headers: UpstreamRequestBuilder.endToEndResponseHeaders(headers)
        )
        context.writeAndFlush(wrapOutboundOut(.head(head)), promise: nil)
    }

    func writeStored(_ entry: CachedResponse, _ presentation: EntryPresentation) {
        let status = presentation.status(of: entry)
        let sendsBody = !isHeadRequest && presentation.sendsBody
        entry.withForm(presentation.coding) { form in
            var headers = HTTPHeaders()
            if presentation.advertisesRanges(entry) { headers.add(name: "Accept-Ranges", value: "bytes") }
            if presentation.keepsStoredFields {
                let keepsAll = presentation.isPlain
                form.forEachField { name, value in
                    guard keepsAll || presentation.keepsStoredField(name) else { return }
                    headers.add(name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
                }
            }
            presentation.forEachOwnField(of: entry, form) { name, value in headers.add(name: name, value: value) }
            headers.add(name: "Age", value: String(presentation.age))
            presentation.annotation.add(to: &headers)

            let bodyRange = presentation.bodyRange(of: form)
            var body: ByteBuffer?
            if sendsBody, !bodyRange.isEmpty {
                switch form.storedBody {
                case .exact(let bytes):
                    body = ByteBuffer(bytes: bytes[(bytes.startIndex + bodyRange.lowerBound)..<(bytes.startIndex + bodyRange.upperBound)])
                case .buffer(let buffer):
                    body = buffer.getSlice(at: buffer.readerIndex + bodyRange.lowerBound, length: bodyRange.count)
                }
            }
            let whole = sendsBody && presentation.range == nil
            requests.countStoredForm(
                presentation.coding,
                savedBytes: whole && presentation.coding != nil ? entry.bodyLength - form.bodyLength : 0
            )
            writeWhole(status: status, headers: headers, body: body, cacheResult: presentation.cacheResult)
        }
    }

    func writeComposed(status: HTTPResponseStatus, headers: HTTPHeaders, body: ByteBuffer, cacheResult: CacheResult?) {
        writeWhole(
            status: status,
            headers: headers,
            body: isHeadRequest || body.readableBytes == 0 ? nil : body,
            cacheResult: cacheResult
        )
    }

    func writeHead(status: HTTPResponseStatus, headers: HTTPHeaders, cacheResult: CacheResult?) {
        response = ResponseProgress(status: status, cacheResult: cacheResult, headWritten: true)
        context?.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: status, headers: headers))), promise: nil)
    }

    func writeBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard let context, context.channel.isActive else {
            return eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        guard !isHeadRequest, buffer.readableBytes > 0 else { return context.eventLoop.makeSucceededVoidFuture() }
        response.bodyBytes += buffer.readableBytes
        // Completes once the stream's flow-control window let the part out: a slow client holds the forward
        // back.
        return context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(buffer))))
    }

    func writeEnd() {
        account(status: response.status, cacheResult: response.cacheResult, bytes: response.bodyBytes)
        end()
    }

    func abort() {
        abandonResponse()
        context?.close(promise: nil)
    }

    /// The response was cut short: it is counted as far as it went.
    func abandonResponse() {
        if response.headWritten, !response.ended {
            account(status: response.status, cacheResult: response.cacheResult, bytes: response.bodyBytes)
        }
        response.ended = true
    }

    /// A whole response: its head, its body if it has one, and its end, flushed together.
    private func writeWhole(status: HTTPResponseStatus, headers: HTTPHeaders, body: ByteBuffer?, cacheResult: CacheResult?) {
        account(status: status, cacheResult: cacheResult, bytes: body?.readableBytes ?? 0)
        response.headWritten = true
        guard let context else { return }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: status, headers: headers))), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        end()
    }

    private func end() {
        response.ended = true
        guard let context else { return }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        finishStream()
    }

    private func account(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int) {
        accounting?.record(status: status, cacheResult: cacheResult, bytes: bytes, in: requests)
        accounting = nil
    }
}
