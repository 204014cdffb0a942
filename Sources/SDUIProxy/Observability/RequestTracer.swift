import Logging
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

    /// Spans made by `tracer`: tests hand in an in-memory one.
    public init(_ tracer: any Tracer) {
        self.tracer = tracer
    }

    /// The OpenTelemetry tracer `configuration` asks for, and the service that exports its spans (it must run for
    /// anything to leave the process); nil when tracing is off.
    static func otlp(
        _ configuration: TracingConfiguration,
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
        // Checked at load: a ratio within 0...1 always makes a sampler.
        otel.traces.sampler = .parentBasedTraceIDRatio(ratio: configuration.sampleRatio) ?? .parentBasedAlwaysOn
        do {
            let backend = try OTel.makeTracingBackend(configuration: otel)
            return (RequestTracer(backend.factory), backend.service)
        } catch {
            // An OTEL_* variable may have turned traces off, or named what cannot be used.
            throw ProxyStartupError(message: "tracing: cannot make the OpenTelemetry tracer: \(error)")
        }
    }

    /// The traces URL of a collector's base URL, as OTLP/HTTP names it (a per-signal endpoint is taken as is).
    static func tracesURL(_ base: String) -> String {
        base.hasSuffix("/v1/traces") ? base : (base.hasSuffix("/") ? base + "v1/traces" : base + "/v1/traces")
    }

    /// Starts the server span of a request: its parent is the trace context the client sent, if any.
    func startSpan(for head: HTTPRequestHead) -> any Span {
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

/// Reads and writes trace context in NIO's `HTTPHeaders`.
struct HTTPHeadersCarrier: Extractor, Injector {
    func extract(key: String, from carrier: HTTPHeaders) -> String? {
        carrier.first(name: key)
    }

    func inject(_ value: String, forKey key: String, into carrier: inout HTTPHeaders) {
        carrier.replaceOrAdd(name: key, value: value)
    }
}
