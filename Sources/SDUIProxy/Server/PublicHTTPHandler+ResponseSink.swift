import NIOCore
import NIOHTTP1
import SDUIProxyCore

// MARK: - Writing responses

extension PublicHTTPHandler: ResponseSink {
    /// Set when the handler is added, before any request.
    var eventLoop: any EventLoop { loop! }

    var accessNotes: AccessNotes? { writer.accessNotes }

    var client: ClientPeer {
        if let peer { return peer }
        var peer = ClientPeer(
            remote: context?.channel.remoteAddress,
            trustedProxies: proxy.configuration.trustedProxies,
            isSecure: isSecure
        )
        peer.lastUpstreamFields = RepeatedUpstreamFields()
        self.peer = peer
        return peer
    }

    func writeInterim(status: HTTPResponseStatus, headers: HTTPHeaders) {
        // Only before the final response: the machine has not begun it, the writer has written nothing of it.
        guard let context, !writer.headWritten else { return }
        var head = context.channel.allocator.buffer(capacity: 256)
        HTTP1ResponseEncoder.writeInterimHead(status: status, headers: headers, into: &head)
        context.writeAndFlush(wrapOutboundOut(head), promise: nil)
    }

    func writeStored(_ entry: CachedResponse, _ presentation: EntryPresentation) {
        // Encoded (and counted) even when the client has gone: a slow answer is the one operators need to see.
        let closes = context == nil || machine.responseStarted()
        let response = writer.stored(entry, presentation, closesConnection: closes)
        send(response.composed, then: response.body)
    }

    func writeComposed(status: HTTPResponseStatus, headers: HTTPHeaders, body: ByteBuffer, cacheResult: CacheResult?) {
        let closes = context == nil || machine.responseStarted()
        let response = writer.composed(
            status: status,
            headers: headers,
            body: body,
            cacheResult: cacheResult,
            closesConnection: closes
        )
        send(response.composed, then: response.body)
    }

    func writeHead(status: HTTPResponseStatus, headers: HTTPHeaders, cacheResult: CacheResult?) {
        // Recorded even when the client has gone, so the response is counted with its own status.
        writer.holdStreamedHead(
            status: status,
            headers: headers,
            cacheResult: cacheResult,
            closesConnection: context == nil || machine.responseStarted(),
            allocator: context?.channel.allocator ?? ByteBufferAllocator()
        )
    }

    func writeHead(_ head: RelayedResponseHead, cacheResult: CacheResult?) {
        writer.holdStreamedHead(
            head,
            cacheResult: cacheResult,
            closesConnection: context == nil || machine.responseStarted(),
            allocator: context?.channel.allocator ?? ByteBufferAllocator()
        )
    }

    func writeBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard let context else { return eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        writer.countBodyPart(buffer)
        switch writer.framing {
        case .none:
            return context.eventLoop.makeSucceededVoidFuture()
        case .contentLength:
            // The head taken straight into the `var` it is written through: a second binding of it would make the
            // append copy its storage first (350 instructions a pass-through).
            if var head = writer.takeHeldHead() {
                if buffer.readableBytes <= HTTP1ResponseWriter.partsCopiedBehindHead {
                    head.writeImmutableBuffer(buffer)
                    context.writeAndFlush(wrapOutboundOut(head), promise: nil)
                    return whenWritable(context)
                }
                context.write(wrapOutboundOut(head), promise: nil)
            }
            context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        case .chunked:
            guard buffer.readableBytes > 0 else { return context.eventLoop.makeSucceededVoidFuture() }
            if let head = writer.takeHeldHead() { context.write(wrapOutboundOut(head), promise: nil) }
            let allocator = context.channel.allocator
            context.write(
                wrapOutboundOut(HTTP1ResponseEncoder.chunkPrefix(count: buffer.readableBytes, allocator: allocator)),
                promise: nil
            )
            context.write(wrapOutboundOut(buffer), promise: nil)
            context.writeAndFlush(wrapOutboundOut(HTTP1ResponseEncoder.chunkSuffix), promise: nil)
        }
        return whenWritable(context)
    }

    /// Completes when the client can take more: at once while the channel is under its high-water mark (the loop's
    /// one succeeded future, no promise a part), else once it is writable again. A write that fails closes the
    /// channel, and the close abandons the exchange.
    private func whenWritable(_ context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        if context.channel.isWritable { return context.eventLoop.makeSucceededVoidFuture() }
        if let waiting = writableAgain { return waiting.futureResult }
        let waiting = context.eventLoop.makePromise(of: Void.self)
        writableAgain = waiting
        return waiting.futureResult
    }

    /// The client is gone: a part waiting for room fails.
    func clientGone() {
        let waiting = writableAgain
        writableAgain = nil
        waiting?.fail(ChannelError.ioOnClosedChannel)
    }

    func writeEnd() {
        if let head = writer.takeHeldHead() { context?.write(wrapOutboundOut(head), promise: nil) }
        // Read before the end resets it: a body whose last part went out with a flush needs no second one.
        let flushed = writer.isFlushed
        let last = writer.streamedEnd(allocator: context?.channel.allocator ?? ByteBufferAllocator())
        finish(with: last, flushed: flushed && last.readableBytes == 0)
    }

    func abort() {
        writer.abandon()
        context?.close(promise: nil)
    }

    /// Writes a composed response, and `body` behind it when it was not copied in.
    private func send(_ composed: ByteBuffer, then body: ByteBuffer?) {
        guard let body else { return finish(with: composed) }
        context?.write(wrapOutboundOut(composed), promise: nil)
        finish(with: body)
    }

    /// Writes the response's last bytes and tells the machine it ended: then the connection closes, takes the
    /// requests pipelined behind it, or waits for the next. A response written while a read burst is handled is
    /// flushed with the burst; one that completes later (after an upstream exchange), at once, unless `flushed`
    /// says nothing written for it waits for a flush: a flush with nothing to write still runs the channel's whole
    /// flush path, about 900 instructions.
    func finish(with last: ByteBuffer, flushed: Bool = false) {
        guard let context else { return }
        let ended = machine.responseEnded(now: clock.now)
        switch ended {
        case .close:
            let lingering: LingeringClose.Limits = machine.isDraining ? .whileDraining : .init()
            // The last write completes once everything before it is out, so a closing connection loses nothing.
            context.writeAndFlush(wrapOutboundOut(last)).assumeIsolated().whenComplete { _ in
                context.closeAfterAnswer(lingering: lingering)
            }
        case .waitForRequest, .handleHeldBack, .dropRestOfBody:
            // A streamed body with a length ends with nothing more to write, only what is held to flush.
            if last.readableBytes > 0 { context.write(wrapOutboundOut(last), promise: nil) }
            // A response whose last part went out with its flush leaves nothing to send.
            if !flushed {
                if isHandlingRead { needsFlush = true } else { context.flush() }
            }
            switch ended {
            case .handleHeldBack:
                schedulePipelinedRequests()
            case .dropRestOfBody(let readNow):
                // Answered before its body was whole: the rest is read and dropped, and its taker let go.
                exchangeAnsweredEarly()
                if readNow { context.read() }
            default:
                noteRequestInProgress(context: context)
            }
            updateWakeUp()
        }
    }
}
