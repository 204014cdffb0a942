/// Distributed tracing (config key `tracing`): a span per request, sent through OpenTelemetry to an OTLP/HTTP
/// collector. Off unless `tracing.otlp.endpoint` names one; then the W3C `traceparent` sent upstream carries the
/// proxy's span.
///
/// The tracer is made when the proxy starts: a reload that changes this section is logged and waits for a
/// restart. swift-otel lays the standard `OTEL_*` variables (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
/// `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, ...) over these values once tracing is on: they win, as the
/// OpenTelemetry specification has environment variables win over code; they do not turn tracing on by themselves.
public struct TracingConfiguration: Sendable, Equatable {
    /// The collector's base URL (`http://otel-collector:4318`); spans go to its `/v1/traces`. Nil: no tracing.
    public var endpoint: String?
    /// How spans are encoded for the collector.
    public var otlpProtocol = OTLPProtocol.httpProtobuf
    /// The share of traces started here that are recorded and exported, 0 to 1. A request that arrives with a
    /// `traceparent` follows its sampled flag instead, so a trace is whole or absent.
    public var sampleRatio = 1.0
    /// The `service.name` of the spans.
    public var serviceName = "sdui-proxy"

    /// OTLP over HTTP: the collector's binary protobuf, or its JSON form.
    public enum OTLPProtocol: String, Sendable, Equatable, CaseIterable {
        case httpProtobuf = "http/protobuf"
        case httpJSON = "http/json"
    }

    public init() {}

    /// Whether spans are made at all.
    public var isEnabled: Bool { endpoint != nil }

    /// Reads the `tracing` section.
    static func parse(_ section: ConfigurationSection) throws(ConfigurationError) -> TracingConfiguration {
        try section.rejectUnknownKeys(["otlp", "sampleRatio", "serviceName"])
        var tracing = TracingConfiguration()
        let otlp = try section.section("otlp")
        try otlp.rejectUnknownKeys(["endpoint", "protocol"])
        let endpoint = try otlp.string("endpoint", default: "")
        if !endpoint.isEmpty {
            guard let url = AbsoluteURL(parsing: endpoint) else {
                let shown = ConfigurationPrinter.redactingURLCredentials(endpoint)
                let credentials =
                    shown == endpoint ? "" : " (credentials go in OTEL_EXPORTER_OTLP_HEADERS, not in the URL)"
                throw otlp.fail("endpoint", "\"\(shown)\" is not an http:// or https:// URL\(credentials)")
            }
            guard url.query == nil else { throw otlp.fail("endpoint", "the collector's URL cannot have a query") }
            tracing.endpoint = endpoint
        }
        let protocolName = try otlp.string("protocol", default: tracing.otlpProtocol.rawValue)
        guard let otlpProtocol = OTLPProtocol(rawValue: protocolName) else {
            let known = OTLPProtocol.allCases.map(\.rawValue).joined(separator: ", ")
            throw otlp.fail("protocol", "\"\(protocolName)\" is not one of \(known) (OTLP over gRPC is not built in)")
        }
        tracing.otlpProtocol = otlpProtocol
        tracing.sampleRatio = try section.fraction("sampleRatio", default: tracing.sampleRatio)
        tracing.serviceName = try section.string("serviceName", default: tracing.serviceName)
        guard !tracing.serviceName.isEmpty, HTTPSyntax.isFieldValue(tracing.serviceName) else {
            throw section.fail("serviceName", "must be a non-empty name of printable characters")
        }
        return tracing
    }
}
