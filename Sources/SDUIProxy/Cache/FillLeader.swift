import Tracing

/// The request that led a coalesced fill, as the requests that waited for its exchange name it: in their access
/// lines (`leader_request_id`), in logs, and by a link from their spans to its span.
public struct FillLeader: Sendable {
    /// The id the fill was sent upstream with (`X-Request-Id`); nil for a fill no client asked for (a prefetch).
    public let requestID: String?
    /// The leader's span context when the request was traced; a waiter's span links to it.
    public let trace: InstrumentationContext?

    public init(requestID: String?, trace: InstrumentationContext?) {
        self.requestID = requestID
        self.trace = trace
    }
}
