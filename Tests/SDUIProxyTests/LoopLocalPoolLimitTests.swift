import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The loop-local pool against a real origin on loopback, counted at the origin's side: it never has more
/// connections open than its limit, and it never loses one.
@Suite("The loop-local pool's connection count")
struct LoopLocalPoolLimitTests {
    /// A client on a one-loop group of its own, so every request of the test shares one pool.
    static func withClient(
        for origin: TestOrigin,
        timeout: Duration,
        maxConnections: Int,
        _ body: (LoopLocalHTTPClient, any EventLoop) async throws -> Void
    ) async throws {
        guard case .http(let httpOrigin) = try UpstreamOrigin(parsing: origin.url) else { throw CancellationError() }
        var configuration = ProxyConfiguration.Upstream()
        configuration.timeout = timeout
        configuration.maxConnections = maxConnections
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let client = try LoopLocalHTTPClient(origin: httpOrigin, configuration: configuration, eventLoopGroup: group)
        // Everything is shut down whatever fails: a client or group left running would end the test process.
        do {
            try await body(client, group.next())
        } catch {
            Issue.record(error)
        }
        try await client.shutdown()
        try await group.shutdownGracefully()
        try await origin.stop()
    }

    static func request(_ target: String) -> UpstreamRequest {
        UpstreamRequest(method: .GET, target: target, headers: [:])
    }

    /// Starts `count` requests for `prefix/0`, `prefix/1`... in one turn of `loop`: they reach the pool together.
    static func together(
        _ count: Int,
        _ prefix: String,
        _ client: LoopLocalHTTPClient,
        on loop: any EventLoop
    ) async throws -> [EventLoopFuture<UpstreamResponse>] {
        try await loop.submit {
            (0..<count).map { index in
                client.fetch(Self.request("\(prefix)/\(index)"), maxBodyBytes: 1 << 20, on: loop)
            }
        }.get()
    }

    @Test("requests that time out waiting for a connection leave none behind: later requests still get one")
    func waitersTimingOut() async throws {
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response.component()
            if request.uri.hasPrefix("/slow") { response.delay = .seconds(6) }
            return response
        }
        // Two seconds: what the requests after the timeouts take on a loaded machine is well inside them.
        try await Self.withClient(for: origin, timeout: .seconds(2), maxConnections: 2) { client, loop in
            for cycle in 0..<3 {
                // Two requests take both connections and six wait for one; each of them times out.
                for (index, future) in try await Self.together(8, "/slow/\(cycle)", client, on: loop).enumerated() {
                    do {
                        _ = try await future.get()
                        Issue.record("cycle \(cycle), request \(index): expected a timeout")
                    } catch let error as ProxyError {
                        #expect(error.kind == .timeout, "cycle \(cycle), request \(index)")
                    }
                }
                try await waitUntil(timeout: .seconds(5)) { origin.openConnections == 0 }
            }
            for index in 0..<6 {
                do {
                    let response = try await client.fetch(
                        Self.request("/fast/\(index)"),
                        maxBodyBytes: 1 << 20,
                        on: loop
                    ).get()
                    #expect(response.status == .ok)
                } catch {
                    Issue.record("request \(index) after the timeouts failed: \(error)")
                }
            }
            // One keep-alive connection served them all, and nothing else is left open: a leaked connection stays
            // open at the origin. (How many were open at once is not counted here: a connection the pool gave up
            // while connecting, for a request whose time was all but gone, may reach the origin's accept queue and
            // be counted open there, for a moment, after the requests above began.)
            let fast = origin.requests.filter { $0.uri.hasPrefix("/fast/") }
            #expect(fast.count == 6)
            #expect(Set(fast.map(\.connection)).count == 1, "\(fast.map(\.connection))")
            try await waitUntil(timeout: .seconds(5)) { origin.openConnections == 1 }
        }
    }

    @Test("a backend that closes keep-alive connections as requests arrive never takes the pool over its limit")
    func backendClosingConnections() async throws {
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response.component()
            if request.uri.hasPrefix("/dropped") { response.closeAfterAnswer = true }
            if request.uri.hasPrefix("/held") { response.delay = .milliseconds(300) }
            return response
        }
        try await Self.withClient(for: origin, timeout: .seconds(5), maxConnections: 2) { client, loop in
            // Each request starts in a task of its own on the loop as the one before it ends: it finds that one's
            // connection idle in the pool while the backend's close of it is on its way.
            let chained = loop.makePromise(of: Int.self)
            loop.execute { Self.chain(client, on: loop, remaining: 60, succeeded: 0, done: chained) }
            #expect(try await chained.futureResult.get() == 60)
            try await waitUntil(timeout: .seconds(5)) { origin.openConnections == 0 }

            origin.resetMaxOpenConnections()
            // Eight requests at once on a limit of two: two connections, six requests waiting for one.
            for future in try await Self.together(8, "/held", client, on: loop) {
                #expect(try await future.get().status == .ok)
            }
            #expect(origin.maxOpenConnections <= 2)
        }
    }

    /// Runs `remaining` requests one after the other on `loop`, and completes `done` with how many succeeded.
    static func chain(
        _ client: LoopLocalHTTPClient,
        on loop: any EventLoop,
        remaining: Int,
        succeeded: Int,
        done: EventLoopPromise<Int>
    ) {
        guard remaining > 0 else { return done.succeed(succeeded) }
        client.fetch(request("/dropped/\(remaining)"), maxBodyBytes: 1 << 20, on: loop) { result in
            let ok = (try? result.get().status) == .ok
            if case .failure(let error) = result { Issue.record("request \(remaining) failed: \(error)") }
            loop.execute {
                chain(client, on: loop, remaining: remaining - 1, succeeded: succeeded + (ok ? 1 : 0), done: done)
            }
        }
    }
}
