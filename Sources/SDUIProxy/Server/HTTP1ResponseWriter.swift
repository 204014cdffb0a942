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

    /// Whether the current response's head has been made: written, or held for its first body part. Either way no
    /// other response can take its place.
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

    /// Makes the head of a streamed response, and holds it until its first body part or its end
    /// (``takeHeldHead()``): a head and a small part then go out as one buffer, one write through the channel
    /// instead of two, and the head would wait for that part's flush in the channel anyway. Its framing follows from
    /// the status, the headers and the method.
    mutating func holdStreamedHead(
        status: HTTPResponseStatus,
        headers: HTTPHeaders,
        cacheResult: CacheResult?,
        closesConnection: Bool,
        allocator: ByteBufferAllocator
    ) {
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
        progress.heldHead = buffer
    }

    /// The head of a streamed response relayed from a backend's bytes (``RelayedResponseHead``), framed and held as
    /// ``holdStreamedHead(status:headers:cacheResult:closesConnection:allocator:)`` frames and holds a head.
    mutating func holdStreamedHead(
        _ head: RelayedResponseHead,
        cacheResult: CacheResult?,
        closesConnection: Bool,
        allocator: ByteBufferAllocator
    ) {
        // With room for a small body behind the head: its first part is copied there (``partsCopiedBehindHead``),
        // and growing the buffer then reallocated it and copied the head again (about 700 instructions).
        let bodyRoom = head.bodyLength.map { $0 <= Self.partsCopiedBehindHead ? $0 : 0 } ?? 0
        var buffer = allocator.buffer(capacity: 512 + bodyRoom)
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
        progress.heldHead = buffer
    }

    /// The largest body part copied behind a held head, so that both go out as one write: copying 8 KiB costs
    /// about what the second write through the channel did (1,000 instructions a pass-through of 2.4 KB saved).
    static let partsCopiedBehindHead = 8192

    /// Counts a body part of the streamed response, which goes out as its framing says.
    mutating func countBodyPart(_ buffer: ByteBuffer) {
        if progress.framing != .none { progress.bodyBytes += buffer.readableBytes }
    }

    /// Whether the streamed response has nothing written that waits for a flush: a body part with bytes went out,
    /// and ``PublicHTTPHandler`` writes every such part with a flush, the head and the parts before it with it.
    var isFlushed: Bool { progress.bodyBytes > 0 }

    /// The head held by ``holdStreamedHead(_:cacheResult:closesConnection:allocator:)``, if it is still to be
    /// written; it is the caller's to write now.
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
