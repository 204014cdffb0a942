import Logging
import NIOCore
import NIOHTTP1
import OTel
import SDUIProxyCore
import ServiceLifecycle
import Tracing

/// Spans for the requests the proxy answers, when `tracing.otlp.endpoint` names a collector.
///
/// A request's span is a server span whose parent is the client's `traceparent` (when it sent one); the fills and
/// forwards it makes send the backend this span's context in its place, so the backend's spans are children of
/// the proxy's. Made once, when the proxy starts: the tracer's exporter is a service of the server's group, and
/// the process-wide `InstrumentationSystem` is left alone, as ``ProxyMetrics`` keeps its own registry.
public struct RequestTracer: Sendable {
    let tracer: any Tracer
    /// Which new traces are recorded, one sampler per loop; nil records them all.
    private let samplers: PerEventLoop<LoopTraceSampler>?

    /// Spans made by `tracer`, `sampleRatio` of new traces recorded (drawn per loop of `eventLoopGroup`); tests
    /// hand in an in-memory tracer and record every trace.
    init(_ tracer: any Tracer, sampleRatio: Double = 1, eventLoopGroup: (any EventLoopGroup)? = nil) {
        self.tracer = tracer
        if sampleRatio < 1, let eventLoopGroup {
            samplers = PerEventLoop(group: eventLoopGroup) { LoopTraceSampler(TraceSampler(ratio: sampleRatio)) }
        } else {
            precondition(sampleRatio >= 1, "a sampled tracer needs the loops its samplers are kept on")
            samplers = nil
        }
    }

    /// Spans made by `tracer`, every trace recorded.
    public init(_ tracer: any Tracer) {
        self.init(tracer, sampleRatio: 1)
    }

    /// The OpenTelemetry tracer `configuration` asks for, and the service that exports its spans (it must run for
    /// anything to leave the process); nil when tracing is off.
    static func otlp(
        _ configuration: TracingConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) throws -> (tracer: RequestTracer, exporter: any Service)? {
        guard let endpoint = configuration.endpoint else { return nil }
        var otel = OTel.Configuration.default
        otel.serviceName = configuration.serviceName
        otel.diagnosticLogger = .custom(logger)
        otel.diagnosticLogLevel = .warning
        otel.propagators = [.traceContext]
        otel.metrics.enabled = false
        otel.logs.enabled = false
        otel.traces.exporter = .otlp
        otel.traces.otlpExporter.endpoint = Self.tracesURL(endpoint)
        otel.traces.otlpExporter.protocol =
            switch configuration.otlpProtocol {
            case .httpProtobuf: .httpProtobuf
            case .httpJSON: .httpJSON
            }
        // New traces are sampled before their span is made (``startSpan(for:on:)``): what reaches the tracer is
        // recorded, unless OTEL_TRACES_SAMPLER thins it further.
        otel.traces.sampler = .parentBasedAlwaysOn
        do {
            let backend = try OTel.makeTracingBackend(configuration: otel)
            let tracer = RequestTracer(
                backend.factory,
                sampleRatio: configuration.sampleRatio,
                eventLoopGroup: eventLoopGroup
            )
            return (tracer, backend.service)
        } catch {
            // An OTEL_* variable may have turned traces off, or named what cannot be used.
            throw ProxyStartupError(message: "tracing: cannot make the OpenTelemetry tracer: \(error)")
        }
    }

    /// The traces URL of a collector's base URL, as OTLP/HTTP names it (a per-signal endpoint is taken as is).
    static func tracesURL(_ base: String) -> String {
        base.hasSuffix("/v1/traces") ? base : (base.hasSuffix("/") ? base + "v1/traces" : base + "/v1/traces")
    }

    /// Starts the server span of a request on `eventLoop`: its parent is the trace context the client sent, if
    /// any. Nil when the request is not traced: its client's `traceparent` says it is not sampled (it then goes
    /// upstream as it came), or, without one, the loop's sampler did not draw it. Nothing else is made for it.
    func startSpan(for head: HTTPRequestHead, on eventLoop: any EventLoop) -> (any Span)? {
        if let traceparent = head.headers.first(name: "traceparent"),
            let sampled = TraceSampler.sampledFlag(ofTraceparent: traceparent)
        {
            guard sampled else { return nil }
        } else if let samplers {
            guard samplers.value(on: eventLoop).sampler.samples() else { return nil }
        }
        var context = InstrumentationContext.topLevel
        tracer.extract(head.headers, into: &context, using: HTTPHeadersCarrier())
        let span = tracer.startSpan(head.method.rawValue, context: context, ofKind: .server)
        guard span.isRecording else { return span }
        span.attributes["http.request.method"] = head.method.rawValue
        span.attributes["url.path"] = AccessLogEntry.printable(head.uri)
        return span
    }

    /// Writes `span`'s context into the headers of a request to the backend (`traceparent`, `tracestate`),
    /// replacing what the client sent: the backend's spans are the proxy's span's children.
    func inject(_ context: InstrumentationContext, into headers: inout HTTPHeaders) {
        tracer.inject(context, into: &headers, using: HTTPHeadersCarrier())
    }
}

/// A loop's ``TraceSampler``, kept where only that loop draws from it.
final class LoopTraceSampler {
    var sampler: TraceSampler

    init(_ sampler: TraceSampler) {
        self.sampler = sampler
    }
}

/// Reads and writes trace context in NIO's `HTTPHeaders`.
struct HTTPHeadersCarrier: Extractor, Injector {
    func extract(key: String, from carrier: HTTPHeaders) -> String? {
        carrier.first(name: key)
    }

    func inject(_ value: String, forKey key: String, into carrier: inout HTTPHeaders) {
        carrier.replaceOrAdd(name: key, value: value)
    }
}
