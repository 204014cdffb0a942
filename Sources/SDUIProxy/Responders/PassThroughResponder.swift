import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Forwards a request the cache does not take (unsafe methods, bypass routes) to the backend, both bodies
/// streamed, and passes the answer to a ``ResponseSink`` as it comes. A successful unsafe method invalidates the
/// entries its answer names when the answer's head arrives.
struct PassThroughResponder {
    /// Forwards `head` with `body` (nil when the request has none) and answers on `sink`.
    func respond(
        to head: HTTPRequestHead,
        target: RequestTarget,
        platform: String,
        cacheResult: CacheResult?,
        body: RequestBodyStream?,
        proxy: ProxyContext,
        sink: any ResponseSink
    ) {
        let client = sink.client
        let upstream = UpstreamRequest(
            method: head.method,
            target: target.description,
            headers: proxy.requestBuilder.headers(
                from: head.headers,
                platform: platform,
                clientAddress: client.address,
                purpose: .passThrough,
                clientIsTrustedProxy: client.isTrustedProxy
            )
        )
        let relay = Self.relay(
            for: head,
            target: target,
            cacheResult: cacheResult,
            invalidator: proxy.invalidator,
            to: sink
        )
        let failureLog = proxy.fetcher.failureLog
        let eventLoop = sink.eventLoop
        let boundSink = NIOLoopBound(sink, eventLoop: eventLoop)
        proxy.client.forward(upstream, body: body, on: eventLoop, to: relay).hop(to: eventLoop)
            .assumeIsolated().whenFailure { error in
                let proxyError =
                    error as? ProxyError ?? ProxyError(.network, "the backend exchange failed", detail: "\(error)")
                failureLog.log(
                    level: .info,
                    "forwarding failed",
                    key: "\(head.method) \(target)",
                    kind: proxyError.kind.description,
                    metadata: ["method": "\(head.method)", "target": "\(target)", "error": "\(proxyError)"]
                )
                // The backend must not see the rest of a body it will not be answered for as a shorter request.
                body?.fail(proxyError)
                switch relay.progress {
                case .waitingForHead:
                    boundSink.value.write(proxyError, cacheResult: cacheResult)
                case .streaming:
                    // Part of the backend's response is out; the only honest signal left is to cut it short.
                    boundSink.value.abort()
                case .ended:
                    break
                }
            }
    }

    /// A relay of the backend's answer to `head` that invalidates, when its head comes, the entries an unsafe
    /// method's answer makes stale.
    static func relay(
        for head: HTTPRequestHead,
        target: RequestTarget,
        cacheResult: CacheResult?,
        invalidator: CacheInvalidator,
        to sink: any ResponseSink
    ) -> ForwardedResponseRelay {
        let method = head.method
        let requestHost = head.headers.first(name: "host")
        return ForwardedResponseRelay(to: sink, cacheResult: cacheResult) { status, headers in
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
}
