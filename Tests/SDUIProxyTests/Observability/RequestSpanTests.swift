import InMemoryTracing
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing
import Tracing

@testable import SDUIProxy

/// A span per request, through the tracer the server is given (an in-memory one here; OpenTelemetry's in
/// deployments, see `OTLPExportTests`): a server span, child of the client's trace context, with the request's
/// cache result, platform, upstream time and id; the backend is sent the span's context.
@Suite("request spans")
struct RequestSpanTests {
    /// A proxy whose requests are traced by `tracer`.
    private static func tuning(_ tracer: InMemoryTracer) -> ProxyServer.Tuning {
        var tuning = ProxyServer.Tuning()
        tuning.tracer = RequestTracer(tracer)
        return tuning
    }

    /// The spans `tracer` has finished, once there are `count` of them: a span ends when its response has
    /// been written, which may be after the client has read it.
    private static func finished(_ tracer: InMemoryTracer, count: Int) async throws -> [FinishedInMemorySpan] {
        try await waitUntil { tracer.finishedSpans.count >= count }
        return tracer.finishedSpans
    }

    @Test(
        "a miss: a server span under the client's trace, its result, platform, upstream time and id; the backend gets its context"
    )
    func miss() async throws {
        let tracer = InMemoryTracer()
        try await ProxyHarness.run(tuning: Self.tuning(tracer)) { proxy in
            let reply = try await proxy.get(
                "/screens/home",
                headers: [
                    (InMemoryTracer.traceIDKey, "client-trace"), (InMemoryTracer.spanIDKey, "client-span"),
                    ("beagle-platform", "ANDROID"),
                ]
            )
            #expect(reply.status == .ok)
            let span = try #require(try await Self.finished(tracer, count: 1).first)
            #expect(span.kind == .server)
            #expect(span.operationName == "GET")
            #expect(span.traceID == "client-trace")
            #expect(span.parentSpanID == "client-span")
            #expect(span.attributes.get("sdui.cache_result") == .string("MISS"))
            #expect(span.attributes.get("sdui.platform") == .string("ANDROID"))
            #expect(span.attributes.get("http.response.status_code") == .int64(200))
            #expect(span.attributes.get("url.path") == .string("/screens/home"))
            #expect(span.attributes.get("sdui.coalesced") == .bool(false))
            guard case .double(let upstream)? = span.attributes.get("sdui.upstream_ms") else {
                Issue.record("no upstream time: \(span.attributes)")
                return
            }
            #expect(upstream >= 0)
            // The id the backend was sent, the one the client got back, and the span's are one.
            let sent = try #require(proxy.origin.requests.last)
            #expect(span.attributes.get("sdui.request_id") == .string(reply["X-Request-Id"] ?? "-"))
            #expect(sent.headers.first(name: "x-request-id") == reply["X-Request-Id"])
            // The backend's request carries the proxy's span, not the client's.
            #expect(sent.headers.first(name: InMemoryTracer.traceIDKey) == "client-trace")
            #expect(sent.headers.first(name: InMemoryTracer.spanIDKey) == span.spanID)

            // A hit: its own span, no backend time.
            _ = try await proxy.get("/screens/home", headers: [("beagle-platform", "ANDROID")])
            let hit = try #require(try await Self.finished(tracer, count: 2).last)
            #expect(hit.attributes.get("sdui.cache_result") == .string("HIT"))
            #expect(hit.attributes.get("sdui.upstream_ms") == nil)
            #expect(hit.traceID != "client-trace")
            #expect(hit.parentSpanID == nil)
        }
    }

    @Test("a route template names the span, as OpenTelemetry's {method} {http.route}")
    func routeName() async throws {
        let tracer = InMemoryTracer()
        try await ProxyHarness.run(
            configure: { $0.metrics.routes = ["/screens/products/{id}"] },
            tuning: Self.tuning(tracer)
        ) { proxy in
            _ = try await proxy.get("/screens/products/42?x=1")
            _ = try await proxy.get("/elsewhere")
            let spans = try await Self.finished(tracer, count: 2)
            let product = try #require(
                spans.first { $0.attributes.get("url.path") == .string("/screens/products/42") }
            )
            #expect(product.operationName == "GET /screens/products/{id}")
            #expect(product.attributes.get("http.route") == .string("/screens/products/{id}"))
            let other = try #require(spans.first { $0.attributes.get("url.path") == .string("/elsewhere") })
            #expect(other.operationName == "GET")
            #expect(other.attributes.get("http.route") == nil)
        }
    }

    @Test("a pass-through: the backend gets the span's context and the span says what came back")
    func passThrough() async throws {
        let tracer = InMemoryTracer()
        try await ProxyHarness.run(
            configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) },
            tuning: Self.tuning(tracer)
        ) { proxy in
            _ = try await proxy.get("/live/feed", method: .POST, body: "{}")
            let span = try #require(try await Self.finished(tracer, count: 1).first)
            #expect(span.operationName == "POST")
            #expect(span.attributes.get("http.response.status_code") == .int64(200))
            let sent = try #require(proxy.origin.requests.last)
            #expect(sent.headers.first(name: InMemoryTracer.spanIDKey) == span.spanID)
            #expect(sent.headers.first(name: "x-request-id") != nil)
        }
    }

    @Test("a coalesced miss: the waiter's span links to the leader's and names the leader's request id")
    func coalesced() async throws {
        let tracer = InMemoryTracer()
        let gate = OriginGate()
        try await ProxyHarness.run(
            origin: { _ in .component(heldBy: gate) },
            tuning: Self.tuning(tracer)
        ) { proxy in
            async let first = proxy.get("/a", headers: [("X-Request-Id", "leader-1")])
            try await waitUntil { proxy.origin.requestCount == 1 }
            async let second = proxy.get("/a", headers: [("X-Request-Id", "waiter-2")])
            try await waitUntil { try await proxy.admin("/cache/stats").body.contains(#""coalescedWaits":1"#) }
            gate.open()
            _ = try await [first, second]
            #expect(proxy.origin.requestCount == 1)
            let spans = try await Self.finished(tracer, count: 2)
            let leader = try #require(spans.first { $0.attributes.get("sdui.request_id") == .string("leader-1") })
            let waiter = try #require(spans.first { $0.attributes.get("sdui.request_id") == .string("waiter-2") })
            #expect(leader.attributes.get("sdui.coalesced") == .bool(false))
            #expect(leader.links.isEmpty)
            #expect(waiter.attributes.get("sdui.coalesced") == .bool(true))
            #expect(waiter.attributes.get("sdui.leader_request_id") == .string("leader-1"))
            #expect(waiter.links.count == 1)
            #expect(waiter.links.first?.context.inMemorySpanContext?.spanID == leader.spanID)
            // The fill went up as the leader's.
            #expect(proxy.origin.requests.first?.headers.first(name: InMemoryTracer.spanIDKey) == leader.spanID)
        }
    }

    @Test("a request whose client went away before it was whole still ends its span, marked as an error")
    func clientGone() async throws {
        let tracer = InMemoryTracer()
        try await ProxyHarness.run(
            configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) },
            tuning: Self.tuning(tracer)
        ) { proxy in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("POST /live/gone HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
            try await waitUntil { tracer.activeSpans.count == 1 }
            await connection.close()
            // No answer is written for it: the span ends when the request is let go.
            let span = try #require(try await Self.finished(tracer, count: 1).first)
            #expect(span.attributes.get("url.path") == .string("/live/gone"))
            #expect(span.status?.code == .error)
            #expect(tracer.activeSpans.isEmpty)
        }
    }

    @Test(
        "sampling: a request the sampler passes over has no span; a client's unsampled traceparent goes up as it came"
    )
    func sampling() async throws {
        let tracer = InMemoryTracer()
        let group = MultiThreadedEventLoopGroup.singleton
        var tuning = ProxyServer.Tuning()
        tuning.tracer = RequestTracer(tracer, sampleRatio: 0)
        try await ProxyHarness.run(eventLoopGroup: group, tuning: tuning) { proxy in
            _ = try await proxy.get("/screens/a")
            let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
            _ = try await proxy.get("/screens/b", headers: [("traceparent", unsampled)])
            #expect(proxy.origin.requests.last?.headers["traceparent"] == [unsampled])
            // A client's sampled trace is recorded whatever the ratio: a trace is whole or absent.
            let sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            _ = try await proxy.get("/screens/c", headers: [("traceparent", sampled)])
            let spans = try await Self.finished(tracer, count: 1)
            #expect(spans.count == 1)
            #expect(spans.first?.attributes.get("url.path") == .string("/screens/c"))
            #expect(tracer.activeSpans.isEmpty)
            // Every request still sends the backend an id.
            #expect(proxy.origin.requests.allSatisfy { $0.headers.first(name: "x-request-id") != nil })
        }
    }

    @Test("an HTTP/2 stream's request has its span as an HTTP/1.1 request does")
    func http2() async throws {
        let tracer = InMemoryTracer()
        try await ProxyHarness.run(tuning: Self.tuning(tracer)) { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            _ = try await client.http2Get("/screens/h2")
            let span = try #require(try await Self.finished(tracer, count: 1).first)
            #expect(span.kind == .server)
            #expect(span.attributes.get("network.protocol.version") == .string("2"))
            #expect(span.attributes.get("sdui.cache_result") == .string("MISS"))
            #expect(span.attributes.get("http.response.status_code") == .int64(200))
            #expect(proxy.origin.requests.last?.headers.first(name: InMemoryTracer.spanIDKey) == span.spanID)
            await client.close()
        }
    }

    @Test("a reload keeps the tracer it started with: tracing changes wait for a restart")
    func reloadKeepsTracer() async throws {
        let tracer = InMemoryTracer()
        try await ProxyHarness.run(tuning: Self.tuning(tracer)) { proxy in
            let before = try #require(proxy.server.context.tracer)
            var configuration = proxy.server.context.configuration
            configuration.tracing.endpoint = "http://127.0.0.1:9/"
            configuration.tracing.sampleRatio = 0
            try await proxy.server.reload(configuration)
            #expect(proxy.server.context.tracer === before)
            #expect(proxy.server.context.configuration.tracing == TracingConfiguration())
            _ = try await proxy.get("/screens/after-reload")
            let span = try #require(try await Self.finished(tracer, count: 1).first)
            #expect(span.attributes.get("url.path") == .string("/screens/after-reload"))
        }
    }

    @Test("tracers made one after another share one thread slot for their samplers")
    func samplersShareOneThreadSlot() {
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/screens/a")
        // More tracers than the system has thread-specific keys, each drawing on this thread.
        var sampled = 0
        for _ in 0..<1_500 where RequestTracer(InMemoryTracer(), sampleRatio: 0.5).startSpan(for: head) != nil {
            sampled += 1
        }
        // Each draws from a sampler of its own ratio: about half (all or none has a chance of 2^-1499).
        #expect(sampled > 0 && sampled < 1_500)
    }
}
