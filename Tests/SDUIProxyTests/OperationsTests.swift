import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Synchronization
import Testing

@testable import SDUIProxy

@Suite("Operations: metrics, admin token, reload")
struct OperationsTests {
    @Test("/metrics reports known traffic in the Prometheus text format")
    func metricsAfterTraffic() async throws {
        try await ProxyHarness.run(origin: { request in
            request.uri == "/down" ? TestOrigin.Response(status: .serviceUnavailable, body: "no") : .component()
        }) { proxy async throws in
            _ = try await proxy.get("/a")
            _ = try await proxy.get("/a")
            _ = try await proxy.get("/a")
            _ = try await proxy.get("/down")
            _ = try await proxy.get("/submit", method: .POST, body: "{}")
            let metrics = try await proxy.admin("/metrics")
            #expect(metrics.status == .ok)
            #expect(metrics["Content-Type"]?.hasPrefix("text/plain; version=0.0.4") == true)
            let lines = metrics.body.split(separator: "\n").map(String.init)
            #expect(
                lines.contains(
                    #"sdui_requests_total{method="GET",status_class="2xx",cache="HIT",protocol="http/1.1"} 2"#
                )
            )
            #expect(
                lines.contains(
                    #"sdui_requests_total{method="GET",status_class="2xx",cache="MISS",protocol="http/1.1"} 1"#
                )
            )
            #expect(
                lines.contains(
                    #"sdui_requests_total{method="GET",status_class="5xx",cache="BYPASS",protocol="http/1.1"} 1"#
                )
            )
            #expect(
                lines.contains(
                    #"sdui_requests_total{method="POST",status_class="2xx",cache="none",protocol="http/1.1"} 1"#
                )
            )
            #expect(lines.contains("sdui_cache_entries 1.0"))
            #expect(lines.contains("sdui_cache_hits_total 2"))
            #expect(lines.contains { $0.hasPrefix("sdui_upstream_duration_seconds_count") && $0.hasSuffix(" 2") })
            #expect(lines.contains { $0.hasPrefix(#"sdui_open_connections{protocol="http/1.1"} "#) })

            _ = try await proxy.admin(
                "/prefetch",
                method: .POST,
                body: #"{"urls":["/p1","/down"],"platforms":["WEB"]}"#
            )
            let afterPrefetch = try await proxy.admin("/metrics").body.split(separator: "\n").map(String.init)
            #expect(afterPrefetch.contains(#"sdui_prefetch_total{outcome="cached"} 1"#))
            #expect(afterPrefetch.contains(#"sdui_prefetch_total{outcome="failed"} 1"#))
        }
    }

    @Test("with a token, every admin endpoint but /health needs it; without one, nothing is checked")
    func adminToken() async throws {
        try await ProxyHarness.run(adminToken: "s3cret") { proxy async throws in
            #expect(try await proxy.admin("/health").status == .ok)
            let refused = try await proxy.admin("/cache/stats")
            #expect(refused.status == .unauthorized)
            #expect(refused.body.contains(#""kind":"unauthorized""#))
            #expect(
                try await proxy.admin("/cache/stats", headers: [("Authorization", "Bearer wrong")]).status
                    == .unauthorized
            )
            #expect(try await proxy.admin("/cache/stats", headers: [("Authorization", "Bearer s3cret")]).status == .ok)
            #expect(try await proxy.admin("/metrics", headers: [("Authorization", "bearer s3cret")]).status == .ok)
            let purge = try await proxy.admin("/cache", method: .DELETE)
            #expect(purge.status == .unauthorized)
        }
    }

    @Test("/health and /ready need no token (admin.probesOpen), and a 401 carries a Bearer challenge")
    func probesOpenAndChallenge() async throws {
        try await ProxyHarness.run(adminToken: "s3cret") { proxy async throws in
            try await waitUntil { try await proxy.admin("/ready").status == .ok }
            #expect(try await proxy.admin("/health").status == .ok)
            let refused = try await proxy.admin("/metrics")
            #expect(refused.status == .unauthorized)
            #expect(refused["WWW-Authenticate"] == #"Bearer realm="sdui-proxy""#)
            // Refused on the head, before a body, by the gate: the same challenge.
            let connection = try await RawConnection(port: proxy.server.adminPort)
            try await connection.send("POST /prefetch HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
            let answer = try await connection.readUntilClosed(timeout: .seconds(5))
            #expect(answer.hasPrefix("HTTP/1.1 401"))
            #expect(answer.lowercased().contains("www-authenticate: bearer realm=\"sdui-proxy\"\r\n"))
        }
    }

    @Test("with admin.probesOpen false, /health and /ready need the token like every other path")
    func probesClosed() async throws {
        try await ProxyHarness.run(configure: { $0.adminProbesOpen = false }, adminToken: "s3cret") {
            proxy async throws in
            for path in ["/health", "/ready"] {
                let refused = try await proxy.admin(path)
                #expect(refused.status == .unauthorized, "\(path)")
                #expect(refused["WWW-Authenticate"] == #"Bearer realm="sdui-proxy""#)
            }
            #expect(try await proxy.admin("/health", headers: [("Authorization", "Bearer s3cret")]).status == .ok)
        }
    }

    @Test("GET /queue and /queue/ID without a queue say it is not configured")
    func queueNotConfigured() async throws {
        try await ProxyHarness.run { proxy async throws in
            for path in ["/queue", "/queue/0123"] {
                let reply = try await proxy.admin(path)
                #expect(reply.status == .notFound, "\(path)")
                #expect(reply.body.contains("the write queue is not configured"), "\(reply.body)")
                #expect(reply.body.hasPrefix(#"{"error":{"kind":"notFound""#))
            }
        }
    }

    @Test("a request without the admin token is refused on its head, before its body is read")
    func adminRefusesOnTheHead() async throws {
        try await ProxyHarness.run(adminToken: "s3cret") { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.adminPort)
            // A megabyte announced and none of it sent: the answer must not wait for it.
            try await connection.send(
                "POST /prefetch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
            )
            let answer = try await connection.readUntilClosed(timeout: .seconds(5))
            #expect(answer.hasPrefix("HTTP/1.1 401"))
            #expect(answer.contains(#""kind":"unauthorized""#))
        }
    }

    @Test("the admin listener caps its connections, and one that sends nothing goes after a few seconds")
    func adminConnectionCap() async throws {
        var tuning = ProxyServer.Tuning()
        tuning.maximumAdminConnections = 2
        // Longer than the whole suite may keep this test between its first connection and its third, so the
        // first still holds its slot when the third comes; short enough to see it go.
        tuning.adminFirstRequestTimeout = .seconds(15)
        try await ProxyHarness.run(tuning: tuning) { proxy async throws in
            let first = try await RawConnection(port: proxy.server.adminPort)
            let second = try await RawConnection(port: proxy.server.adminPort)
            try await second.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await second.readResponse()?.head.hasPrefix("HTTP/1.1 200") == true)
            let third = try await RawConnection(port: proxy.server.adminPort)
            let refused = try await third.readUntilClosed(timeout: .seconds(5))
            #expect(refused.hasPrefix("HTTP/1.1 503"))
            #expect(refused.contains("too many open admin connections"))
            // The first, which never sent a request, does not hold its slot for long.
            _ = try await first.readUntilClosed(timeout: .seconds(60))
            #expect(first.isClosed)
            await second.close()
        }
    }

    @Test("an admin connection idle past limits.idleTimeout, or slow to finish a request, is closed")
    func adminTimeouts() async throws {
        // Long enough that a loaded machine still gets the health request in before the idle timer fires (with one
        // second, a test task held off the CPU for a second between connecting and sending was closed unanswered).
        try await ProxyHarness.run(configure: {
            $0.limits.idleTimeout = .seconds(3)
            $0.limits.requestTimeout = .seconds(3)
        }) { proxy async throws in
            let idle = try await RawConnection(port: proxy.server.adminPort)
            try await idle.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await idle.readResponse()?.head.hasPrefix("HTTP/1.1 200") == true)
            _ = try await idle.readUntilClosed(timeout: .seconds(15))
            #expect(idle.isClosed)

            let slow = try await RawConnection(port: proxy.server.adminPort)
            try await slow.send("POST /prefetch HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            _ = try await slow.readUntilClosed(timeout: .seconds(15))
            #expect(slow.isClosed)
        }
    }

    @Test("an admin listener on a public address without a token does not start")
    func publicAdminWithoutToken() async throws {
        var configuration = ProxyHarness.testConfiguration(upstream: "http://127.0.0.1:9")
        configuration.admin.host = "0.0.0.0"
        await #expect(throws: ConfigurationError.self) {
            _ = try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
        }
    }

    @Test("a reload applies new TTLs and headers without dropping the cache")
    func reload() async throws {
        try await ProxyHarness.run(origin: { request in .component(maxAge: request.uri == "/kept" ? 60 : nil) }) {
            proxy async throws in
            _ = try await proxy.get("/kept")
            #expect(try await proxy.get("/a")["X-Cache"] == "BYPASS")

            var configuration = proxy.server.context.configuration
            configuration.cache.policy.defaultTTL = .seconds(60)
            configuration.headers.append((name: "X-Api-Key", value: "k2"))
            try await proxy.server.reload(configuration)

            #expect(try await proxy.get("/a")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/a")["X-Cache"] == "HIT")
            #expect(proxy.origin.requests.last?.headers.first(name: "x-api-key") == "k2")
            #expect(try await proxy.get("/kept")["X-Cache"] == "HIT")
        }
    }

    @Test("a reload applies limits.maxConnections and the coalesced wait of a new upstream.timeout and bodyIdleTimeout")
    func reloadLimits() async throws {
        try await ProxyHarness.run { proxy async throws in
            var configuration = proxy.server.context.configuration
            configuration.limits.maxConnections = 1
            // Far above what a miss takes on a loaded machine: the reload's arithmetic is what is checked.
            configuration.upstream.timeout = .seconds(30)
            configuration.upstream.bodyIdleTimeout = .seconds(70)
            try await proxy.server.reload(configuration)
            #expect(proxy.server.context.fetcher.coalescer.maximumWait == .seconds(101))

            let first = try await RawConnection(port: proxy.server.publicPort)
            try await first.send("GET /screens/home HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await first.readResponse()?.head.hasPrefix("HTTP/1.1 200") == true)
            let refused = try await HardeningTests.exchange(proxy, "GET /screens/home HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(refused.hasPrefix("HTTP/1.1 503"))
            await first.close()
        }
    }

    @Test("a reload keeps the running event loops; a shutdown retires a replaced upstream client before they stop")
    func reloadThenShutdown() async throws {
        let origin = try await TestOrigin { _ in .component() }
        var configuration = ProxyHarness.testConfiguration(upstream: origin.url)
        configuration.eventLoops.count = 1
        configuration.upstream.timeout = .seconds(30)
        let server = try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
        var reloaded = configuration
        reloaded.eventLoops.count = 3
        reloaded.upstream.timeout = .seconds(5)
        do {
            try await server.reload(reloaded)
        } catch {
            await server.shutdown(drainTimeout: .seconds(2))
            try await origin.stop()
            throw error
        }
        #expect(server.context.configuration.eventLoops.count == 1)
        #expect(Array(server.eventLoopGroup.makeIterator()).count == 1)
        // The old client would otherwise be shut down 31 s from now (its timeout and a second), on loops that no
        // longer run.
        #expect(server.retiringClientCount == 1)
        let started = ContinuousClock.now
        await server.shutdown(drainTimeout: .seconds(2))
        #expect(server.retiringClientCount == 0)
        #expect(ContinuousClock.now - started < .seconds(20))
        await #expect(throws: ProxyStartupError.self) { try await server.reload(reloaded) }
        try await origin.stop()
    }
}

@Suite("Shutting down with work in flight")
struct ShutdownTests {
    @Test("a shutdown ends the prefetches running and waiting before the event loops stop; a second call returns")
    func prefetchBacklog() async throws {
        let gate = OriginGate()
        defer { gate.open() }
        try await ProxyHarness.run(
            origin: { _ in .component(heldBy: gate) },
            configure: {
                $0.prefetch.concurrency = 1
                // The held exchange ends when the test has the origin drop it, never by its timeout: ended before
                // the shutdown had dropped the backlog (a loaded machine can take seconds to get there), it would
                // let the next prefetch start.
                $0.upstream.timeout = .seconds(60)
            }
        ) { proxy async throws in
            let prefetches = (0..<4).map {
                proxy.server.prefetcher.prefetch(target: "/held/\($0)", platform: "WEB", followActions: 0)
            }
            // Read as they end: once the shutdown has stopped the loops, their futures can no longer be waited on.
            let outcomes = Mutex<[Prefetcher.Outcome]>([])
            for prefetch in prefetches { prefetch.whenSuccess { outcome in outcomes.withLock { $0.append(outcome) } } }
            try await waitUntil { proxy.origin.requestCount == 1 }
            async let shutdown: Void = proxy.server.shutdown(drainTimeout: .milliseconds(100))
            // The shutdown drops the three waiting; the held one is still in flight, and the shutdown waits for it.
            try await waitUntil { outcomes.withLock { $0.count } == 3 }
            #expect(proxy.origin.requestCount == 1)
            // The origin drops the held exchange: it ends, failed, and the shutdown goes on.
            await proxy.origin.closeOpenConnections()
            await shutdown
            let ended = outcomes.withLock { $0 }
            #expect(ended.count == 4)
            #expect(ended.allSatisfy { if case .failed = $0 { true } else { false } })
            // The one the origin held was sent; the three waiting behind it never were.
            #expect(proxy.origin.requestCount == 1, "\(proxy.origin.requests.map(\.uri))")
            // The harness shuts the proxy down again when the test ends: that call returns at once.
        }
    }
}
