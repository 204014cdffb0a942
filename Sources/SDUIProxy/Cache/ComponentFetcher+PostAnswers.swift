import NIOCore
import SDUIProxyCore

extension ComponentFetcher {
    /// Stores `response`, which answered another request (a `POST` whose answer represents its own target,
    /// ``PostAnswerReuse``), as this fill's answer would be: decoded, validated, stored by the same rules. `ticket`
    /// was taken when that answer's head came, so an invalidation since voids the store; it ends here.
    func storeAnswer(
        _ response: UpstreamResponse,
        as request: Request,
        ticket: InvalidationHistory.Ticket,
        requestTime: Int64,
        on eventLoop: any EventLoop
    ) -> Result<Outcome, ProxyError> {
        defer { cache.endFill(ticket) }
        let exchange = Exchange(
            fetcher: self,
            eventLoop: eventLoop,
            completion: { _, _ in },
            coalescedRun: nil,
            ticket: ticket,
            requestTime: requestTime,
            started: .now()
        )
        var noPlan: StoredPlan?  // A POST's answer starts no prefetch of the navigation it names.
        return Result { () throws(ProxyError) in try process(response, for: request, exchange, &noPlan) }
    }
}
