import Logging
import NIOHTTP1
import NIOPosix
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
///
/// A class: every request asks the context for it, and a reference is one count where a struct of an existential
/// and a sampler table is several.
public final class RequestTracer: Sendable {
    let tracer: any Tracer
    /// The share of new traces recorded.
    private let sampleRatio: Double
    /// Each event loop's thread draws from a sampler of its own, made at its first draw: a thread-specific slot
    /// costs a load, where a table of the loops costs a hash. One slot for the process (a slot is a system key,
    /// of which there are about a thousand); a thread's sampler is remade when another tracer draws.
    private static let samplers = ThreadSpecificVariable<ThreadTraceSampler>()

    /// Spans made by `tracer`, `sampleRatio` of new traces recorded; tests hand in an in-memory tracer.
    public init(_ tracer: any Tracer, sampleRatio: Double = 1) {
        self.tracer = tracer
        self.sampleRatio = sampleRatio
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
        // New traces are sampled before their span is made (``startSpan(for:on:)``): what reaches the tracer is
        // recorded, unless OTEL_TRACES_SAMPLER thins it further.
        otel.traces.sampler = .parentBasedAlwaysOn
        do {
            let backend = try OTel.makeTracingBackend(configuration: otel)
            return (RequestTracer(backend.factory, sampleRatio: configuration.sampleRatio), backend.service)
        } catch {
            // An OTEL_* variable may have turned traces off, or named what cannot be used.
            throw ProxyStartupError(message: "tracing: cannot make the OpenTelemetry tracer: \(error)")
        }
    }

    /// The traces URL of a collector's base URL, as OTLP/HTTP names it (a per-signal endpoint is taken as is).
    static func tracesURL(_ base: String) -> String {
        base.hasSuffix("/v1/traces") ? base : (base.hasSuffix("/") ? base + "v1/traces" : base + "/v1/traces")
    }

    /// Starts the server span of a request: its parent is the trace context the client sent, if any. Nil when
    /// the request is not traced: its client's `traceparent` says it is not sampled (it then goes upstream as it
    /// came), or, without one, this thread's sampler did not draw it. Nothing else is made for it.
    func startSpan(for head: HTTPRequestHead) -> RequestSpan? {
        if let traceparent = head.headers.first(name: "traceparent"),
            let sampled = TraceSampler.sampledFlag(ofTraceparent: traceparent)
        {
            guard sampled else { return nil }
        } else if sampleRatio < 1 {
            guard sampleRatio > 0, threadSampler().sampler.samples() else { return nil }
        }
        var context = InstrumentationContext.topLevel
        tracer.extract(head.headers, into: &context, using: HTTPHeadersCarrier())
        let span = tracer.startSpan(head.method.rawValue, context: context, ofKind: .server)
        guard span.isRecording else { return RequestSpan(span, tracer: self) }
        span.attributes["http.request.method"] = head.method.rawValue
        // The path only: a query may carry tokens, and the collector is another party.
        let path = head.uri.utf8.firstIndex(of: UInt8(ascii: "?")).map { head.uri[..<$0] } ?? head.uri[...]
        span.attributes["url.path"] = AccessLogEntry.printable(String(path))
        return RequestSpan(span, tracer: self)
    }

    /// The calling thread's sampler, made at its first draw.
    private func threadSampler() -> ThreadTraceSampler {
        if let sampler = Self.samplers.currentValue, sampler.owner == ObjectIdentifier(self),
            sampler.sampler.ratio == sampleRatio
        {
            return sampler
        }
        let sampler = ThreadTraceSampler(TraceSampler(ratio: sampleRatio), owner: ObjectIdentifier(self))
        Self.samplers.currentValue = sampler
        return sampler
    }

    /// Writes `span`'s context into the headers of a request to the backend (`traceparent`, `tracestate`),
    /// replacing what the client sent: the backend's spans are the proxy's span's children.
    func inject(_ context: InstrumentationContext, into fields: inout HTTPFieldLines) {
        tracer.inject(context, into: &fields, using: HTTPFieldLinesInjector())
    }
}

/// A thread's ``TraceSampler``, kept where only that thread draws from it: `@unchecked Sendable` only so that the
/// thread-specific slot holding it is.
final class ThreadTraceSampler: @unchecked Sendable {
    var sampler: TraceSampler
    /// The tracer it draws for; with its ratio, what a thread checks before drawing (a freed tracer's identity may
    /// be a new one's, and then only a sampler of the same ratio is kept).
    let owner: ObjectIdentifier

    init(_ sampler: TraceSampler, owner: ObjectIdentifier) {
        self.sampler = sampler
        self.owner = owner
    }
}

/// Reads trace context from a client's `HTTPHeaders`.
struct HTTPHeadersCarrier: Extractor {
    func extract(key: String, from carrier: HTTPHeaders) -> String? {
        carrier.first(name: key)
    }
}

/// Writes trace context into the fields of a request to the backend.
struct HTTPFieldLinesInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout HTTPFieldLines) {
        carrier.replaceOrAdd(name: key, value: value)
    }
}
