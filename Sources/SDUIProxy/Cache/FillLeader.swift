import Tracing

/// The request that led a coalesced fill, as the requests that waited for its exchange name it: in their access
/// lines (`leader_request_id`), in logs, and by a link from their spans to its span.
///
/// It holds the leading request and reads its id and trace only when a waiter asks: every plain miss leads a run
/// and most runs have no waiter, and looking the id up among the upstream fields and making a string of it cost
/// each miss about 950 instructions (callgrind, run AU in `Benchmarks/HISTORY.md`).
public struct FillLeader: Sendable {
    private let request: ComponentFetcher.Request

    init(_ request: ComponentFetcher.Request) {
        self.request = request
    }

    /// The id the fill was sent upstream with (`X-Request-Id`); nil for a fill no client asked for (a prefetch).
    public var requestID: String? { request.requestID }

    /// The leader's span context when the request was traced; a waiter's span links to it.
    public var trace: InstrumentationContext? { request.trace }
}
