import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Forwards a request the cache does not take (unsafe methods, bypass routes) to the backend, with its body read
/// whole first or streamed (``ForwardedRequestBody``), and passes the answer to a ``ResponseSink`` as it comes. A
/// successful unsafe method invalidates the entries its answer names when the answer's head arrives.
struct PassThroughResponder {
    /// Forwards `head` with `requestBody` and answers on `sink`. `fillsCache` is for a cache miss streamed to its
    /// client: its backend connection is a fill's, not from the forwards' share of the pool.
    ///
    /// - Parameters:
    ///   - clientFields: what the client sees changed in the answer's fields; by default, an answer to a GET or
    ///     HEAD loses the tag field as stored answers do (unless `cache.exposeTags`), and others pass as they came.
    ///   - requestFields: what the router noted of `head`'s fields; nil to look for each in the head.
    func respond(
        to head: HTTPRequestHead,
        target: RequestTarget,
        platform: String,
        requestFields: RequestFieldPresence? = nil,
        annotation: CacheAnnotation?,
        body requestBody: ForwardedRequestBody,
        fillsCache: Bool = false,
        clientFields: ClientFacingFields? = nil,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        let identity = RequestID.upstreamIdentity(
            of: head,
            notes: sink.accessNotes,
            fields: requestFields
        )
        var upstream = Self.upstreamRequest(
            for: head,
            target: target,
            platform: platform,
            requestFields: requestFields,
            proxy: proxy,
            sink: sink,
            requester: identity
        )
        upstream.fillsCache = fillsCache
        // The id the request was stamped with, not looked for again among its headers.
        let requestID = identity.requestID
        let body: RequestBodyStream?
        var spoolFile: RequestSpoolFile?
        switch requestBody {
        case .none:
            body = nil
        case .streamed(let stream):
            body = stream
        case .whole(let buffer):
            body = nil
            upstream.body = buffer
            // The proxy has the body already (and said 100 Continue itself): the backend is not to wait for it.
            upstream.fields.remove(name: "Expect")
        case .spooled(let file, let length):
            body = file.stream(length: length, on: sink.eventLoop)
            spoolFile = file
            upstream.fields.remove(name: "Expect")
        }
        let readsCache = head.method.isGETOrHEAD
        let relay = Self.relay(
            for: head,
            target: target,
            annotation: annotation,
            invalidator: proxy.invalidator,
            clientFields: clientFields
                ?? (readsCache ? proxy.forwardedClientFields : ClientFacingFields()),
            requestID: requestID,
            keeper: PostAnswerKeeper.make(
                for: head,
                requestID: requestID,
                clientAddress: sink.client.address,
                proxy: proxy,
                on: sink.eventLoop
            ),
            to: sink
        )
        let failureLog = proxy.fetcher.failureLog
        let eventLoop = sink.eventLoop
        // The relay answers a failure itself, with the sink and annotation it holds: the completion, made for every
        // forward, captures neither.
        proxy.client.forward(upstream, body: body, on: eventLoop, to: relay) { [spoolFile] result in
            if case .failure(let error) = result {
                let proxyError = Self.logFailure(error, of: head, target: target, requestID: requestID, in: failureLog)
                // The backend must not see the rest of a body it will not be answered for as a shorter request.
                body?.fail(proxyError)
                relay.fail(with: proxyError)
            }
            // The request has ended, however it ended: its body's file goes.
            spoolFile?.remove(eventLoop: eventLoop)
        }
    }

    /// The request forwarded for `head`: its headers as the backend expects them, with the client's forwarding
    /// details. `requestFields` is what the router noted of `head`'s fields (nil: looked for in the head).
    static func upstreamRequest(
        for head: HTTPRequestHead,
        target: RequestTarget,
        platform: String,
        requestFields: RequestFieldPresence? = nil,
        proxy: ProxyContext,
        sink: any ResponseSink,
        requester: UpstreamIdentity? = nil
    ) -> UpstreamRequest {
        let client = sink.client
        var fields = proxy.requestBuilder.fields(
            from: head.headers,
            noted: requestFields,
            platform: platform,
            clientAddress: client.address,
            purpose: .passThrough,
            clientIsTrustedProxy: client.isTrustedProxy,
            received: client.received(head.version),
            reusing: client.lastUpstreamFields
        )
        let identity =
            requester
            ?? RequestID.upstreamIdentity(
                of: head,
                notes: sink.accessNotes,
                fields: requestFields
            )
        identity.stamp(
            &fields,
            mayHaveID: proxy.requestBuilder.mayCarryRequestID(noted: requestFields)
        )
        return UpstreamRequest(method: head.method, target: target.description, fields: fields)
    }

    /// Logs a failed forward of `head` (once an interval per target and kind), as the error model names it.
    static func logFailure(
        _ error: any Error,
        of head: HTTPRequestHead,
        target: RequestTarget,
        requestID: String?,
        in failureLog: FailureLog
    ) -> ProxyError {
        let proxyError =
            error as? ProxyError ?? ProxyError(.network, "the backend exchange failed", detail: "\(error)")
        failureLog.log(
            level: .info,
            "forwarding failed",
            key: "\(head.method) \(target)",
            kind: proxyError.kind.description,
            metadata: [
                "method": "\(head.method)", "target": "\(target)", "error": "\(proxyError)",
            ].merging(requestID.map { ["request_id": .string($0)] } ?? [:]) { $1 }
        )
        return proxyError
    }

    /// A relay of the backend's answer to `head` that invalidates, when its head comes, the entries an unsafe
    /// method's answer makes stale, and changes its fields as `clientFields` says.
    static func relay(
        for head: HTTPRequestHead,
        target: RequestTarget,
        annotation: CacheAnnotation?,
        invalidator: CacheInvalidator,
        clientFields: ClientFacingFields = ClientFacingFields(),
        requestID: String? = nil,
        keeper: PostAnswerKeeper? = nil,
        to sink: any ResponseSink
    ) -> ForwardedResponseRelay {
        let method = head.method
        // Only an unsafe method's answer can make stored responses stale; a safe one's head is not read for it.
        // (The closure is made only then: its context is an allocation, and a GET's forward would pay for it.)
        var invalidate: (@Sendable (HTTPResponseStatus, HTTPHeaders) -> Void)?
        if !method.isSafe {
            let requestHost = head.headers.first(name: "host")
            invalidate = { status, headers in
                Invalidation.apply(
                    method: method,
                    target: target,
                    status: status,
                    responseHeaders: headers,
                    requestHost: requestHost,
                    invalidator: invalidator
                )
            }
        }
        return ForwardedResponseRelay(
            to: sink,
            annotation: annotation,
            takesInterim: InterimRelay.reaches(head.version),
            clientFields: clientFields,
            requestID: requestID,
            keeper: keeper,
            receivedHead: invalidate
        )
    }
}
