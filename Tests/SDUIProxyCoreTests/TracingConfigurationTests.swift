import Testing

@testable import SDUIProxyCore

@Suite("The tracing section: off by default, the collector, the sampling, the environment, errors")
struct TracingConfigurationTests {
    private func load(
        _ yaml: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> TracingConfiguration {
        try SectionLoading.load(yaml, environment: environment).tracing
    }

    private func error(_ yaml: String, environment: [String: String] = [:]) -> ConfigurationError? {
        SectionLoading.error(yaml, environment: environment)
    }

    @Test("without the section, or without an endpoint, nothing is traced")
    func defaults() throws {
        let tracing = try load("")
        #expect(tracing == TracingConfiguration())
        #expect(!tracing.isEnabled)
        #expect(tracing.endpoint == nil)
        #expect(tracing.otlpProtocol == .httpProtobuf)
        #expect(tracing.sampleRatio == 1)
        #expect(tracing.serviceName == "sdui-proxy")
        #expect(try load("tracing: { sampleRatio: 0.5 }").isEnabled == false)
        #expect(try load("tracing: { otlp: { endpoint: \"\" } }").isEnabled == false)
    }

    @Test("each key is read from the file, and from SDUI_PROXY_TRACING_* over it")
    func keys() throws {
        let tracing = try load(
            """
            tracing:
              otlp: { endpoint: "https://collector.internal:4318", protocol: http/json }
              sampleRatio: 0.1
              serviceName: edge-eu
            """
        )
        #expect(tracing.isEnabled)
        #expect(tracing.endpoint == "https://collector.internal:4318")
        #expect(tracing.otlpProtocol == .httpJSON)
        #expect(tracing.sampleRatio == 0.1)
        #expect(tracing.serviceName == "edge-eu")
        let fromEnvironment = try load(
            "tracing: { otlp: { endpoint: \"http://a:4318\" } }",
            environment: [
                "SDUI_PROXY_TRACING_OTLP_ENDPOINT": "http://b:4318",
                "SDUI_PROXY_TRACING_SAMPLE_RATIO": "0",
            ]
        )
        #expect(fromEnvironment.endpoint == "http://b:4318")
        #expect(fromEnvironment.sampleRatio == 0)
    }

    @Test("an endpoint that is not an http(s) URL, credentials in it, an unknown protocol or key are refused")
    func errors() {
        let notURL = error("tracing: { otlp: { endpoint: collector:4318 } }")
        #expect(notURL?.key == "tracing.otlp.endpoint")
        let credentials = error("tracing: { otlp: { endpoint: \"http://user:secret@collector:4318\" } }")
        #expect(credentials?.key == "tracing.otlp.endpoint")
        #expect(credentials?.problem.contains("secret") == false)
        #expect(credentials?.problem.contains("OTEL_EXPORTER_OTLP_HEADERS") == true)
        #expect(error("tracing: { otlp: { endpoint: \"http://c:4318/?a=1\" } }")?.key == "tracing.otlp.endpoint")
        let grpc = error("tracing: { otlp: { endpoint: \"http://c:4317\", protocol: grpc } }")
        #expect(grpc?.key == "tracing.otlp.protocol")
        #expect(grpc?.problem.contains("http/protobuf") == true)
        #expect(error("tracing: { sampleRatio: 1.5 }")?.key == "tracing.sampleRatio")
        #expect(error("tracing: { serviceName: \"\" }")?.key == "tracing.serviceName")
        #expect(error("tracing: { exporter: otlp }")?.key == "tracing.exporter")
        #expect(error("tracing: { otlp: { headers: x } }")?.key == "tracing.otlp.headers")
    }

    @Test("printed, the section loads back to the same configuration")
    func printedRoundTrip() throws {
        var configuration = ProxyConfiguration()
        for tracing in [
            TracingConfiguration(),
            try load("tracing: { otlp: { endpoint: \"http://[::1]:4318\", protocol: http/json }, sampleRatio: 0 }"),
            try load("tracing: { otlp: { endpoint: \"https://c/v1/traces\" }, serviceName: \"a: b\" }"),
        ] {
            configuration.tracing = tracing
            let printed = ConfigurationPrinter.yaml(configuration, adminTokenIsSet: false)
            #expect(try ConfigurationLoader().load(yaml: printed) == configuration, "\(printed)")
        }
    }
}
