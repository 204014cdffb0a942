import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// The response side of one HTTP/1.1 connection, without the channel: it encodes each response with
/// ``HTTP1ResponseEncoder`` (whole responses into the loop's buffer), counts and logs each response once, and keeps
/// what a streamed response has written so far. The connection tells it whether a response closes the connection
/// and writes what it returns.
struct HTTP1ResponseWriter {
    /// What the current streamed response has written.
    private struct Progress {
        var status = HTTPResponseStatus.ok
        var cacheResult: CacheResult?
        var framing = HTTP1ResponseEncoder.Framing.none
        var bodyBytes = 0
        var headWritten = false
        /// Everything written for the response so far went out with a flush: its last body part was flushed.
        var flushed = false
        /// The streamed head, not written yet: it goes out with the first body part, or at the end.
        var heldHead: ByteBuffer?
    }

    /// The loop's tally of responses, and its buffer for composing them.
    private let requests: RequestTally
    private let buffers: ResponseBufferRecycler
    /// The request being answered is HEAD: no body goes out.
    private var isHeadRequest = false
    /// Counts and logs the current request when its response ends; nil once recorded.
    private var accounting: RequestAccounting? { didSet { accessNotes = accounting?.notes } }
    private var progress = Progress()

    init(requests: RequestTally, buffers: ResponseBufferRecycler) {
        self.requests = requests
        self.buffers = buffers
    }

    /// What the current request's access-log line and span will say; nil when it takes no notes. Kept beside
    /// `accounting`: responders read them often, and a read then copies nothing.
    private(set) var accessNotes: AccessNotes?

    /// Whether the current response's head has been written.
    var headWritten: Bool { progress.headWritten }

    /// How the current response's body parts are framed.
    var framing: HTTP1ResponseEncoder.Framing { progress.framing }

    /// A request is to be answered.
    mutating func startRequest(isHead: Bool, accounting: RequestAccounting?) {
        isHeadRequest = isHead
        self.accounting = accounting
        progress = Progress()
    }

    /// The next answer is for no request (a 400 or 408 before a head arrived): nothing of the one before applies.
    mutating func answerWithoutRequest() {
        isHeadRequest = false
        accounting = nil
        progress = Progress()
    }

    /// A stored entry's response: the composed bytes, and the stored body behind them when it was not copied in.
    mutating func stored(
        _ entry: CachedResponse,
        _ presentation: EntryPresentation,
        closesConnection: Bool
    ) -> (composed: ByteBuffer, body: ByteBuffer?) {
        let status = presentation.status(of: entry)
        let sendsBody = !isHeadRequest && presentation.sendsBody
        return entry.withForm(presentation.coding) { form in
            let bodyBytes = sendsBody ? presentation.bodyRange(of: form).count : 0
            account(status: status, cacheResult: presentation.cacheResult, bytes: bodyBytes)
            requests.countStoredForm(of: entry, form, presentation, sendsBody: sendsBody)
            // Beyond the head: the status line and `Accept-Ranges`, Age, X-Cache, Cache-Status and Connection, with
            // room to spare.
            var buffer = buffers.buffer(
                minimumCapacity: form.encodedHeadBound(common: entry.commonLines) + 320 + bodyBytes
            )
            let largeBody = HTTP1ResponseEncoder.writeStored(
                entry,
                form,
                presentation,
                status: status,
                sendsBody: sendsBody,
                closesConnection: closesConnection,
                into: &buffer
            )
            buffers.recycle(buffer)
            return (buffer, largeBody)
        }
    }

    /// A response the proxy composed: head and, when small, the body in one buffer; a larger body behind it.
    mutating func composed(
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        body: ByteBuffer,
        cacheResult: CacheResult?,
        closesConnection: Bool
    ) -> (composed: ByteBuffer, body: ByteBuffer?) {
        let bodyBytes = isHeadRequest ? 0 : body.readableBytes
        account(status: status, cacheResult: cacheResult, bytes: bodyBytes)
        // A small body is copied behind the head: one buffer, one write.
        let copiesBody = bodyBytes <= CachedResponse.maximumExactBodyBytes
        var buffer = buffers.buffer(minimumCapacity: 256 + (copiesBody ? bodyBytes : 0))
        HTTP1ResponseEncoder.writeHead(
            status: status,
            headers: headers,
            framing: .contentLength,
            closesConnection: closesConnection,
            into: &buffer
        )
        if copiesBody, bodyBytes > 0 { buffer.writeImmutableBuffer(body) }
        buffers.recycle(buffer)
        return (buffer, copiesBody || bodyBytes == 0 ? nil : body)
    }

    /// The head of a streamed response; its framing follows from the status, the headers and the method.
    mutating func streamedHead(
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        cacheResult: CacheResult?,
        closesConnection: Bool,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        let framing = HTTP1ResponseEncoder.framing(status: status, headers: headers, isHead: isHeadRequest)
        progress = Progress(status: status, cacheResult: cacheResult, framing: framing, headWritten: true)
        var buffer = allocator.buffer(capacity: 512)
        HTTP1ResponseEncoder.writeHead(
            status: status,
            headers: headers,
            framing: framing,
            closesConnection: closesConnection,
            into: &buffer
        )
        return buffer
    }

    /// The head of a streamed response relayed from a backend's bytes (``RelayedResponseHead``); framed as
    /// ``streamedHead(status:headers:cacheResult:closesConnection:allocator:)`` frames a head.
    mutating func streamedHead(
        _ head: RelayedResponseHead,
        cacheResult: CacheResult?,
        closesConnection: Bool,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: 512)
        HTTPWireFormat.writeStatusLine(head.status, into: &buffer)
        // The lines say whether there is a `Content-Length` as they are written; the framing line comes after them.
        let hasContentLength = head.writeLines(into: &buffer)
        let framing = HTTP1ResponseEncoder.framing(
            status: head.status,
            hasContentLength: hasContentLength,
            isHead: isHeadRequest
        )
        progress = Progress(status: head.status, cacheResult: cacheResult, framing: framing, headWritten: true)
        HTTP1ResponseEncoder.writeHeadEnd(framing: framing, closesConnection: closesConnection, into: &buffer)
        return buffer
    }

    /// Counts a body part of the streamed response, which goes out as its framing says.
    mutating func countBodyPart(_ buffer: ByteBuffer) {
        if progress.framing != .none { progress.bodyBytes += buffer.readableBytes }
    }

    /// A body part of the streamed response went out with a flush, and the head and parts before it with it.
    /// Every part written is flushed (``PublicHTTPHandler`` writes each with `writeAndFlush`), so from then on nothing
    /// written for the response waits for a flush.
    mutating func bodyPartFlushed() {
        progress.flushed = true
    }

    /// Whether the streamed response has nothing written that waits for a flush.
    var isFlushed: Bool { progress.flushed }

    /// Keeps the streamed response's encoded head until its first body part or its end: a head and a small part
    /// then go out as one buffer, one write through the channel instead of two.
    mutating func holdHead(_ head: ByteBuffer) {
        progress.heldHead = head
    }

    /// The head kept by ``holdHead(_:)``, if it is still to be written; it is the caller's to write now.
    mutating func takeHeldHead() -> ByteBuffer? {
        defer { progress.heldHead = nil }
        return progress.heldHead
    }

    /// The last bytes of the streamed response (the last chunk, or nothing), which is counted and logged.
    mutating func streamedEnd(allocator: ByteBufferAllocator) -> ByteBuffer {
        account(status: progress.status, cacheResult: progress.cacheResult, bytes: progress.bodyBytes)
        let last = progress.framing == .chunked ? HTTP1ResponseEncoder.lastChunk : allocator.buffer(capacity: 0)
        progress = Progress()
        return last
    }

    /// The streamed response was cut short: it is counted as far as it went.
    mutating func abandon() {
        if progress.headWritten {
            account(status: progress.status, cacheResult: progress.cacheResult, bytes: progress.bodyBytes)
        }
        progress = Progress()
    }

    private mutating func account(status: HTTPResponseStatus, cacheResult: CacheResult?, bytes: Int) {
        accounting?.record(status: status, cacheResult: cacheResult, bytes: bytes, in: requests)
        accounting = nil
    }
}
