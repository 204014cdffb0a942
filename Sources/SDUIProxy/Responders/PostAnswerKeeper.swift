import Logging
import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Keeps a copy of a forwarded `POST`'s answer that represents the `POST`'s own target (``PostAnswerReuse``: a
/// `200` whose `Content-Location` is that target, with explicit freshness), and stores it under the target's `GET`
/// key once it has ended whole, as a fill of that `GET` would have been (RFC 9110 section 9.3.3). The client's
/// answer is passed on as it comes, untouched; the copy is bounded by `upstream.maxResponseBytes` and takes its
/// share of what all fills may hold (`upstream.maxBufferedBytes`): past either it is dropped, as is the copy of
/// an answer cut short.
///
/// Made only for a `POST` whose `GET` would be answered through the cache; confined to the forward's loop.
final class PostAnswerKeeper {
    private enum State {
        case waitingForHead
        case keeping(
            status: HTTPResponseStatus,
            headers: HTTPHeaders,
            body: ByteBuffer,
            ticket: InvalidationHistory.Ticket
        )
        case done
    }

    /// The fill of the target's `GET`, made from the `POST`'s head: its key, route policy and client headers.
    private let fill: ComponentFetcher.Request
    private let fetcher: ComponentFetcher
    /// The target as the client named it (origin form), and its `Host`: what `Content-Location` must name.
    private let clientTarget: String
    private let requestHost: String?
    private let maxBytes: Int
    /// What all fills' bodies may hold at once, the copy's included; nil for no limit but ``maxBytes``.
    private let budget: ByteBudget?
    /// What the copy holds of ``budget``, given back when the copy goes.
    private var reserved = 0
    private let eventLoop: any EventLoop
    private let logger: Logger
    /// When the `POST` went out, for the stored answer's age (RFC 9111 section 4.2.3).
    private let requestTime = HTTPDate.now()
    private var state = State.waitingForHead

    /// A keeper for the answer to `head`, when a `GET` of its target would be answered through the cache; nil
    /// for any other request.
    static func make(
        for head: HTTPRequestHead,
        requestID: String?,
        clientAddress: String?,
        proxy: ProxyContext,
        on eventLoop: any EventLoop
    ) -> PostAnswerKeeper? {
        guard case .POST = head.method else { return nil }
        var get = head
        get.method = .GET
        guard case .cache(let request) = proxy.router.route(get) else { return nil }
        let fill = proxy.cacheFill(
            key: request.key,
            target: request.target,
            platform: request.platform,
            clientHeaders: head.headers,
            clientFields: request.fields,
            policy: request.policy,
            staleEntry: nil,
            clientAddress: clientAddress,
            clientIsTrustedProxy: false,
            followActions: 0,
            // Never sent: the id names the POST in the lines logged about the copy.
            requester: requestID.map { UpstreamIdentity(requestID: $0, span: nil) }
        )
        return PostAnswerKeeper(
            fill: fill,
            fetcher: proxy.fetcher,
            clientTarget: request.target.description,
            requestHost: head.headers.first(name: "host"),
            maxBytes: proxy.configuration.upstream.maxResponseBytes,
            budget: proxy.fetcher.bufferBudget,
            eventLoop: eventLoop,
            logger: proxy.logger
        )
    }

    private init(
        fill: ComponentFetcher.Request,
        fetcher: ComponentFetcher,
        clientTarget: String,
        requestHost: String?,
        maxBytes: Int,
        budget: ByteBudget?,
        eventLoop: any EventLoop,
        logger: Logger
    ) {
        self.budget = budget
        self.fill = fill
        self.fetcher = fetcher
        self.clientTarget = clientTarget
        self.requestHost = requestHost
        self.maxBytes = maxBytes
        self.eventLoop = eventLoop
        self.logger = logger
    }

    /// A copy that never ended whole (the backend or the client went away) lets go of its fill ticket and of what
    /// it held of the fills' budget.
    deinit {
        if case .keeping(_, _, _, let ticket) = state { fetcher.cache.endFill(ticket) }
        budget?.release(reserved)
    }

    /// The answer's head: kept when it represents the target. Called after the answer's invalidations, so the
    /// ticket taken here is not voided by the `POST`'s own.
    func head(status: HTTPResponseStatus, headers: HTTPHeaders) {
        guard case .waitingForHead = state else { return }
        switch PostAnswerReuse.decide(
            target: clientTarget,
            requestHost: requestHost,
            status: status,
            fields: HTTPFieldLines(headers)
        ) {
        case .keep:
            let ticket = fetcher.cache.beginFill(target: fill.key.target)
            state = .keeping(status: status, headers: headers, body: ByteBuffer(), ticket: ticket)
        case .skip:
            state = .done
        }
    }

    /// A part of the answer's body; past `upstream.maxResponseBytes`, or when the fills' budget cannot take it,
    /// the copy is dropped.
    func bodyPart(_ part: ByteBuffer) {
        guard case .keeping(let status, let headers, var body, let ticket) = state else { return }
        state = .done
        guard body.readableBytes + part.readableBytes <= maxBytes, budget?.reserve(part.readableBytes) ?? true
        else { return drop(ticket) }
        if budget != nil { reserved += part.readableBytes }
        var part = part
        body.writeBuffer(&part)
        state = .keeping(status: status, headers: headers, body: body, ticket: ticket)
    }

    /// The copy is let go: its ticket ends, and what it held of the fills' budget is given back.
    private func drop(_ ticket: InvalidationHistory.Ticket) {
        fetcher.cache.endFill(ticket)
        budget?.release(reserved)
        reserved = 0
    }

    /// The answer ended whole: it is stored under the target's `GET` key, by the rules a fill's answer follows.
    func end() {
        guard case .keeping(let status, let headers, let body, let ticket) = state else { return }
        state = .done
        let answer = UpstreamResponse(status: status, headers: headers, body: body)
        let outcome = fetcher.storeAnswer(answer, as: fill, ticket: ticket, requestTime: requestTime, on: eventLoop)
        // Stored or not, the copy's bytes are the entry's now, or gone: they no longer count as a fill's.
        budget?.release(reserved)
        reserved = 0
        guard logger.logLevel <= .debug else { return }
        let result: String
        switch outcome {
        case .success(.stored): result = "stored"
        case .success(.notStored(_, let reason)): result = "not stored: \(reason)"
        case .success(.invalidated(_, let reason)): result = "invalidated in flight: \(reason)"
        case .success(.revalidated), .success(.servedStale): result = "not stored"
        case .failure(let error): result = "not stored: \(error)"
        }
        logger.debug(
            "a POST's answer for later GETs of its target",
            metadata: fill.logMetadata(["result": "\(result)"])
        )
    }
}
