import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
import SDUIProxyCore

// MARK: - Writing responses

/// A response on an HTTP/2 stream: a HEADERS frame, DATA frames, and END_STREAM on the last of them. No framing
/// and no `Connection`: the stream is the response's frame. A stored entry's fields are read from its stored lines
/// as name and value (split at known separators, never parsed as HTTP/1.1), their names lower-cased as HTTP/2
/// writes them, straight into the HPACK block.
extension HTTP2Stream: ResponseSink {
    var eventLoop: any EventLoop { loop }

    var client: ClientPeer {
        if let peer { return peer }
        var peer = ClientPeer(
            remote: connection.remoteAddress,
            trustedProxies: proxy.configuration.trustedProxies,
            isSecure: isSecure
        )
        peer.lastUpstreamFields = connection.lastUpstreamFields
        self.peer = peer
        return peer
    }

    func writeInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {
        guard isOpen, !response.headWritten else { return }
        let block = Self.block(status: status, UpstreamRequestBuilder.endToEndResponseHeaders(headers))
        connection.write(.headers(.init(headers: block)), on: id, promise: nil)
        connection.flush()
    }

    func writeStored(_ entry: CachedResponse, _ presentation: EntryPresentation) {
        let status = presentation.status(of: entry)
        let sendsBody = !isHeadRequest && presentation.sendsBody
        entry.withForm(presentation.coding) { form in
            // Stored fields repeat from hit to hit and are indexed, but for a cookie (`storeSetCookie`), which is
            // added after them. The indexed ones go into the block as a list: `HPACKHeaders.add` checks each name
            // for non-ASCII bytes a byte at a time, and stored names were checked when they were parsed.
            var indexed: [(String, String)] = []
            indexed.reserveCapacity(16)
            var cookies: [String] = []
            indexed.append((":status", Self.statusText(status)))
            if presentation.advertisesRanges(entry) { indexed.append(("accept-ranges", "bytes")) }
            if presentation.keepsStoredFields {
                let keepsAll = presentation.keepsEveryStoredLine
                form.forEachField(common: entry.commonLines) { name, value in
                    guard keepsAll || presentation.keepsStoredField(name) else { return }
                    let name = Self.lowercased(name)
                    let value = String(decoding: value, as: UTF8.self)
                    if name == "set-cookie" { cookies.append(value) } else { indexed.append((name, value)) }
                }
            }
            var block = HPACKHeaders(indexed)
            block.reserveCapacity(indexed.count + cookies.count + 6)
            for cookie in cookies { block.add(name: "set-cookie", value: cookie, indexing: .neverIndexed) }
            presentation.forEachOwnField(of: entry, form) { name, value in
                let name = name.lowercased()
                block.add(name: name, value: value, indexing: Self.indexing(of: name))
            }
            block.add(name: "age", value: String(presentation.age), indexing: .nonIndexable)
            presentation.annotation.forEachField(lowercased: true) { name, value in
                block.add(name: name, value: value, indexing: Self.indexing(of: name))
            }

            let bodyRange = presentation.bodyRange(of: form)
            var body: ByteBuffer?
            if sendsBody, !bodyRange.isEmpty {
                switch form.storedBody {
                case .exact(let bytes):
                    let start = bytes.startIndex + bodyRange.lowerBound
                    body = ByteBuffer(bytes: bytes[start..<(start + bodyRange.count)])
                case .buffer(let buffer):
                    body = buffer.getSlice(at: buffer.readerIndex + bodyRange.lowerBound, length: bodyRange.count)
                }
            }
            requests.countStoredForm(of: entry, form, presentation, sendsBody: sendsBody)
            writeWhole(block, status: status, body: body, cacheResult: presentation.cacheResult)
        }
    }

    func writeComposed(status: HTTPResponseStatus, headers: HTTPHeaders, body: ByteBuffer, cacheResult: CacheResult?) {
        writeWhole(
            Self.block(status: status, headers),
            status: status,
            body: isHeadRequest || body.readableBytes == 0 ? nil : body,
            cacheResult: cacheResult
        )
    }

    func writeHead(status: HTTPResponseStatus, headers: HTTPHeaders, cacheResult: CacheResult?) {
        // One response a stream: a second (a forward's answer behind a 408 already sent) is dropped.
        guard !response.headWritten else { return }
        response = ResponseProgress(status: status, cacheResult: cacheResult, headWritten: true)
        // A response to HEAD, or one that has no body, ends with its head.
        let bodyless = isHeadRequest || status == .noContent || status == .notModified
        response.endedWithHead = bodyless
        let frame = HTTP2Frame.FramePayload.Headers(headers: Self.block(status: status, headers), endStream: bodyless)
        guard isOpen else { return }
        sentEnd = bodyless
        connection.write(.headers(frame), on: id, promise: nil)
    }

    func writeHead(_ head: RelayedResponseHead, cacheResult: CacheResult?) {
        // HPACK encodes a collection: the head's fields become one.
        writeHead(status: head.status, headers: head.headers, cacheResult: cacheResult)
    }

    func writeBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard isOpen, !response.ended else {
            return eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        guard !response.endedWithHead, buffer.readableBytes > 0 else {
            return eventLoop.makeSucceededVoidFuture()
        }
        response.bodyBytes += buffer.readableBytes
        // Completes once the stream's flow-control window let the part out: a slow client holds the forward
        // back.
        let written = eventLoop.makePromise(of: Void.self)
        connection.write(.data(.init(data: .byteBuffer(buffer))), on: id, promise: written)
        connection.flush()
        return written.futureResult
    }

    func writeEnd() {
        guard !response.ended else { return }
        account(status: response.status, cacheResult: response.cacheResult, bytes: response.bodyBytes)
        response.ended = true
        guard isOpen else { return }
        if !response.endedWithHead {
            let last = HTTP2Frame.FramePayload.Data(data: .byteBuffer(ByteBuffer()), endStream: true)
            sentEnd = true
            connection.write(.data(last), on: id, promise: nil)
        }
        connection.flush()
        finishStream()
    }

    func abort() {
        abandonResponse()
        reset()
    }

    /// The response was cut short: it is counted as far as it went.
    func abandonResponse() {
        if response.headWritten, !response.ended {
            account(status: response.status, cacheResult: response.cacheResult, bytes: response.bodyBytes)
        }
        response.ended = true
    }

    /// A whole response: its HEADERS frame, its body in one DATA frame if it has one, END_STREAM on the last,
    /// flushed together.
    private func writeWhole(
        _ block: HPACKHeaders,
        status: HTTPResponseStatus,
        body: ByteBuffer?,
        cacheResult: CacheResult?
    ) {
        guard !response.headWritten else { return }
        account(status: status, cacheResult: cacheResult, bytes: body?.readableBytes ?? 0)
        response.headWritten = true
        response.ended = true
        guard isOpen else { return }
        sentEnd = true
        connection.write(.headers(.init(headers: block, endStream: body == nil)), on: id, promise: nil)
        if let body { connection.write(.data(.init(data: .byteBuffer(body), endStream: true)), on: id, promise: nil) }
        connection.flush()
        finishStream()
    }

    private func account(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int) {
        accounting?.record(status: status, cacheResult: cacheResult, bytes: bytes, in: requests)
        accounting = nil
    }

    // MARK: Header blocks

    /// `:status`, then `headers` as HTTP/2 carries them: lower-case names, without the fields that are HTTP/1.1's
    /// connection's (`Connection` and those it names, `Keep-Alive`, `Transfer-Encoding`, `Upgrade`).
    static func block(status: HTTPResponseStatus, _ headers: HTTPHeaders) -> HPACKHeaders {
        var block = HPACKHeaders()
        block.reserveCapacity(headers.count + 1)
        block.add(name: ":status", value: statusText(status))
        let named = headers[canonicalForm: "connection"].map { $0.lowercased() }
        for (name, value) in headers {
            let lowered = name.lowercased()
            guard !connectionFields.contains(lowered), !named.contains(lowered) else { continue }
            block.add(name: lowered, value: value, indexing: indexing(of: lowered))
        }
        return block
    }

    /// Whether HPACK may add a field to the connection's dynamic table (RFC 7541 section 6.2). Fields whose value
    /// changes from one response to the next (`Age`, `Cache-Status` with its ttl, ids, dates, ranges) would only
    /// push out those that repeat, and the encoder searches the whole table for every field it writes: with them
    /// indexed, a hit's header block cost more than the rest of the hit. A cookie is never indexed (section 7.1.3),
    /// so that no intermediary guesses it from the table's compression.
    static func indexing(of name: String) -> HPACKIndexing {
        switch name {
        case "age", "cache-status", "x-request-id", "date", "content-range", "traceparent", "tracestate":
            .nonIndexable
        case "set-cookie":
            .neverIndexed
        default:
            .indexable
        }
    }

    private static let connectionFields: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade",
    ]

    /// The status code's three digits; the common ones without formatting a number.
    private static func statusText(_ status: HTTPResponseStatus) -> String {
        switch status.code {
        case 200: "200"
        case 206: "206"
        case 304: "304"
        case 404: "404"
        default: String(status.code)
        }
    }

    /// A stored field's name, lower-cased: the stored lines keep the backend's spelling, HTTP/2 writes names in
    /// lower case. Names of up to 15 bytes, most of them, make strings held inline, with no allocation.
    static func lowercased(_ name: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: name.count) { out in
            for index in 0..<name.count {
                let byte = name[index]
                out[index] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            }
            return name.count
        }
    }
}
