import NIOHTTP1
import SDUIProxyCore
import Tracing

/// What a request to the backend says about the client's request it is made for: its id (`X-Request-Id`, also
/// returned to the client) and, when tracing, the context of its span (`traceparent`), so that the backend's
/// spans are children of the proxy's.
struct UpstreamIdentity {
    let requestID: String
    /// The request's span and the tracer that made it.
    let span: RequestSpan?

    /// The span context that requests waiting for this one's fill link to: only a recorded span's.
    var trace: InstrumentationContext? {
        guard let span, span.span.isRecording else { return nil }
        return span.span.context
    }

    /// Writes the id and the trace context into `fields`, replacing the client's: the trace context is sent
    /// whether the span is recorded or not, so that the backend follows the same sampling decision.
    ///
    /// - Parameter mayHaveID: whether `fields` may hold an `X-Request-Id` already
    ///   (``UpstreamRequestBuilder/mayCarryRequestID(noted:)``); when not, none is looked for to replace.
    func stamp(_ fields: inout HTTPFieldLines, mayHaveID: Bool = true) {
        if mayHaveID {
            fields.replaceOrAdd(name: "X-Request-Id", value: requestID)
        } else {
            fields.add(name: "X-Request-Id" as StaticString, value: requestID)
        }
        guard let span else { return }
        // The client's tracestate belongs to its traceparent, which the span's replaces; the span's own context
        // writes the tracestate it carries, if any (an unrelated trace gets none).
        fields.remove(name: "tracestate")
        span.inject(into: &fields)
    }
}
