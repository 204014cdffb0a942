import NIOHTTP1
import SDUIProxyCore
import Tracing

/// A traced request's server span, with the tracer that writes its context into requests to the backend.
///
/// A class: the notes and the upstream identity hold it as one optional reference, which costs a request that is
/// not traced a nil check, where an optional pair of an existential span and a tracer is copied through its
/// witness tables at every test.
final class RequestSpan: Sendable {
    let span: any Span
    let tracer: RequestTracer

    init(_ span: any Span, tracer: RequestTracer) {
        self.span = span
        self.tracer = tracer
    }

    /// Writes the span's context into `fields` (`traceparent`, `tracestate`), replacing what was there.
    func inject(into fields: inout HTTPFieldLines) {
        tracer.inject(span.context, into: &fields)
    }
}
