import Foundation
import NIOCore
import Testing

@testable import SDUIProxy

/// `tracing.otlp.endpoint`: the proxy's spans go through swift-otel to an OTLP/HTTP collector (a loopback server
/// here, answering as a collector does), and the backend is sent the proxy's span as W3C `traceparent`.
@Suite("OTLP export")
struct OTLPExportTests {
    /// A client's trace: its trace id and the id of the span it sent the request from.
    private static let clientTrace = "0af7651916cd43dd8448eb211c80319c"
    private static let clientSpan = "b7ad6b7169203331"

    @Test(
        "a request's span reaches the collector, child of the client's traceparent; the backend's parent is the proxy's span"
    )
    func exported() async throws {
        let collector = try await TestOrigin { _ in TestOrigin.Response(body: "{}") }
        var origin: TestOrigin.Request?
        var reply: ProxyHarness.Reply?
        try await ProxyHarness.run(
            configure: {
                $0.tracing.endpoint = collector.url
                $0.tracing.otlpProtocol = .httpJSON
                $0.tracing.serviceName = "edge-test"
            }
        ) { proxy in
            reply = try await proxy.get(
                "/screens/home",
                headers: [("traceparent", "00-\(Self.clientTrace)-\(Self.clientSpan)-01"), ("beagle-platform", "IOS")]
            )
            origin = proxy.origin.requests.last
        }
        // The proxy has shut down: its span processor sent what it held before its exporter stopped.
        let sent = try #require(origin?.headers.first(name: "traceparent"))
        let parts = sent.split(separator: "-").map(String.init)
        #expect(parts.count == 4)
        #expect(parts.first == "00")
        #expect(parts.dropFirst().first == Self.clientTrace)
        let proxySpan = try #require(parts.dropFirst(2).first)
        #expect(proxySpan != Self.clientSpan)
        #expect(parts.last == "01")

        let exports = collector.requests.filter { $0.uri == "/v1/traces" }
        try await collector.stop()
        #expect(exports.allSatisfy { $0.method == .POST })
        #expect(exports.first?.headers.first(name: "content-type")?.hasPrefix("application/json") == true)
        let spans = try exports.flatMap { try Self.spans(in: $0.body) }
        let span = try #require(spans.first { Self.hex($0.span["spanId"]) == proxySpan }, "\(spans)")
        #expect(span.service == "edge-test")
        #expect(Self.hex(span.span["traceId"]) == Self.clientTrace)
        #expect(Self.hex(span.span["parentSpanId"]) == Self.clientSpan)
        #expect(span.span["name"] as? String == "GET")
        let attributes = Self.attributes(of: span.span)
        #expect(attributes["sdui.cache_result"] == "MISS")
        #expect(attributes["sdui.platform"] == "IOS")
        #expect(attributes["http.response.status_code"] == "200")
        #expect(attributes["sdui.request_id"] == reply?["X-Request-Id"])
        #expect(attributes["sdui.upstream_ms"] != nil)
    }

    @Test("W3C Trace Context: the client's tracestate goes up with its trace, and not with a trace of the proxy's")
    func tracestate() async throws {
        let collector = try await TestOrigin { _ in TestOrigin.Response(body: "{}") }
        try await ProxyHarness.run(configure: { $0.tracing.endpoint = collector.url }) { proxy in
            let state = "congo=t61rcWkgMzE"
            _ = try await proxy.get(
                "/screens/a?token=secret",
                headers: [("traceparent", "00-\(Self.clientTrace)-\(Self.clientSpan)-01"), ("tracestate", state)]
            )
            let joined = try #require(proxy.origin.requests.last)
            #expect(joined.headers.first(name: "traceparent")?.hasPrefix("00-\(Self.clientTrace)-") == true)
            #expect(joined.headers["tracestate"] == [state])
            // A traceparent of zeros names no trace: the proxy starts its own, and the client's state stays out.
            let zeros = "00-\(String(repeating: "0", count: 32))-\(Self.clientSpan)-01"
            _ = try await proxy.get("/screens/b", headers: [("traceparent", zeros), ("tracestate", state)])
            let own = try #require(proxy.origin.requests.last)
            let traceparent = try #require(own.headers.first(name: "traceparent"))
            #expect(traceparent != zeros)
            #expect(!traceparent.contains(Self.clientSpan))
            #expect(own.headers["tracestate"].isEmpty)
        }
        // The exported spans name paths, not queries.
        let bodies = collector.requests.filter { $0.uri == "/v1/traces" }.map { String(buffer: $0.body) }
        try await collector.stop()
        #expect(bodies.allSatisfy { !$0.contains("secret") })
    }

    @Test("without a collector, the client's traceparent reaches the backend as it came")
    func offByDefault() async throws {
        try await ProxyHarness.run { proxy in
            let traceparent = "00-\(Self.clientTrace)-\(Self.clientSpan)-01"
            _ = try await proxy.get("/screens/home", headers: [("traceparent", traceparent)])
            #expect(proxy.origin.requests.last?.headers["traceparent"] == [traceparent])
            #expect(proxy.server.context.tracer == nil)
        }
    }

    /// The spans of an OTLP/JSON export request, each with its resource's `service.name`.
    private static func spans(in body: ByteBuffer) throws -> [(service: String?, span: [String: Any])] {
        let object = try JSONSerialization.jsonObject(with: Data(body.readableBytesView))
        let resourceSpans = (object as? [String: Any])?["resourceSpans"] as? [[String: Any]] ?? []
        return resourceSpans.flatMap { resource -> [(service: String?, span: [String: Any])] in
            let resourceAttributes = attributes(of: resource["resource"] as? [String: Any] ?? [:])
            let scopes = resource["scopeSpans"] as? [[String: Any]] ?? []
            return scopes.flatMap {
                ($0["spans"] as? [[String: Any]] ?? []).map { (resourceAttributes["service.name"], $0) }
            }
        }
    }

    /// An id of an OTLP/JSON export in hex, as `traceparent` writes it: swift-otel writes ids as protobuf's JSON
    /// mapping does bytes, in base64.
    private static func hex(_ id: Any?) -> String? {
        guard let text = id as? String, let bytes = Data(base64Encoded: text) else { return nil }
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// An OTLP/JSON object's attributes, each value as text (`intValue` is a string in OTLP/JSON already).
    private static func attributes(of object: [String: Any]) -> [String: String] {
        var attributes: [String: String] = [:]
        for attribute in object["attributes"] as? [[String: Any]] ?? [] {
            guard let key = attribute["key"] as? String, let value = attribute["value"] as? [String: Any],
                let first = value.values.first
            else { continue }
            attributes[key] = "\(first)"
        }
        return attributes
    }
}
