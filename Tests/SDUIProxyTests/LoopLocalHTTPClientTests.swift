import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("The event-loop-local upstream client")
struct LoopLocalHTTPClientTests {
    static func client(for origin: TestOrigin, timeout: Duration = .seconds(2)) throws -> LoopLocalHTTPClient {
        guard case .http(let httpOrigin) = try UpstreamOrigin(parsing: origin.url) else { throw CancellationError() }
        var configuration = ProxyConfiguration.Upstream()
        configuration.timeout = timeout
        configuration.maxConnections = 4
        return LoopLocalHTTPClient(
            origin: httpOrigin,
            configuration: configuration,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton
        )
    }

    static func get(
        _ client: LoopLocalHTTPClient,
        _ target: String,
        loop: any EventLoop,
        maxBodyBytes: Int = 1 << 20
    )
        async throws -> UpstreamResponse
    {
        try await client.fetch(
            UpstreamRequest(method: .GET, target: target, headers: [:]),
            maxBodyBytes: maxBodyBytes,
            on: loop
        ).get()
    }

    @Test("sequential requests on one event loop reuse one keep-alive connection")
    func reuse() async throws {
        let origin = try await TestOrigin { _ in .component() }
        let client = try Self.client(for: origin)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        for index in 0..<20 {
            let response = try await Self.get(client, "/r/\(index)", loop: loop)
            #expect(response.status == .ok)
        }
        #expect(origin.requestCount == 20)
        #expect(origin.acceptedConnections == 1)
        #expect(origin.requests.allSatisfy { $0.headers.first(name: "host") == "127.0.0.1:\(origin.port)" })
        try await client.shutdown()
        try await origin.stop()
    }

    @Test("a keep-alive connection the backend closed is replaced, and the request still succeeds")
    func staleConnection() async throws {
        let origin = try await TestOrigin { _ in .component() }
        let client = try Self.client(for: origin)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        _ = try await Self.get(client, "/a", loop: loop)
        await origin.closeOpenConnections()
        let again = try await Self.get(client, "/b", loop: loop)
        #expect(again.status == .ok)
        #expect(origin.acceptedConnections == 2)
        try await client.shutdown()
        try await origin.stop()
    }

    @Test("failures map onto the error model: too large, timeout, unreachable")
    func failures() async throws {
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response.component(extra: #","pad":"\#(String(repeating: "p", count: 4000))""#)
            if request.uri == "/slow" { response.delay = .seconds(2) }
            return response
        }
        let client = try Self.client(for: origin, timeout: .milliseconds(300))
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        await #expect(throws: ProxyError(.upstreamTooLarge, "the backend's response is larger than 100 bytes")) {
            _ = try await Self.get(client, "/big", loop: loop, maxBodyBytes: 100)
        }
        do {
            _ = try await Self.get(client, "/slow", loop: loop)
            Issue.record("expected a timeout")
        } catch let error as ProxyError {
            #expect(error.kind == .timeout)
        }
        try await origin.stop()
        do {
            _ = try await Self.get(client, "/down", loop: loop)
            Issue.record("expected a network error")
        } catch let error as ProxyError {
            #expect(error.kind == .network)
        }
        try await client.shutdown()
    }

    @Test("requests with a body carry it with its length")
    func body() async throws {
        let origin = try await TestOrigin { _ in TestOrigin.Response(status: .created, headers: [], body: "") }
        let client = try Self.client(for: origin)
        let response = try await client.fetch(
            UpstreamRequest(
                method: .POST,
                target: "/orders",
                headers: ["Content-Type": "application/json"],
                body: ByteBuffer(string: #"{"n":1}"#)
            ),
            maxBodyBytes: 1024,
            on: MultiThreadedEventLoopGroup.singleton.next()
        ).get()
        #expect(response.status == .created)
        #expect(String(buffer: try #require(origin.requests.first).body) == #"{"n":1}"#)
        #expect(origin.requests.first?.headers.first(name: "content-length") == "7")
        try await client.shutdown()
        try await origin.stop()
    }
}
