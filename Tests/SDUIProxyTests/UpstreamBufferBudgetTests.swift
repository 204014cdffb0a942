import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The client that fills the cache from an HTTP backend takes a fill's body from the byte budget
/// (`upstream.maxBufferedBytes`) while it holds it.
@Suite("The upstream client's byte budget")
struct UpstreamBufferBudgetTests {
    static func client(for origin: TestOrigin) throws -> any NetworkClient {
        guard case .http(let httpOrigin) = try UpstreamOrigin(parsing: origin.url) else { throw CancellationError() }
        var configuration = ProxyConfiguration.Upstream()
        configuration.timeout = .seconds(10)
        let group = MultiThreadedEventLoopGroup.singleton
        return try LoopLocalHTTPClient(origin: httpOrigin, configuration: configuration, eventLoopGroup: group)
    }

    /// A fetch for a cache fill, its body taken from `budget`.
    static func fill(_ client: any NetworkClient, _ target: String, budget: ByteBudget) async throws -> UpstreamResponse
    {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let promise = loop.makePromise(of: UpstreamResponse.self)
        client.fetch(
            UpstreamRequest(method: .GET, target: target, headers: [:]),
            maxBodyBytes: 1 << 20,
            budget: budget,
            on: loop,
            completion: promise.completeWith
        )
        return try await promise.futureResult.get()
    }

    @Test(
        "a fill holds its body's bytes while it reads it; one that does not fit fails; nothing else counts"
    )
    func budget() async throws {
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response(headers: [("Content-Type", "text/plain")])
            response.body = String(repeating: "b", count: 600)
            response.chunked = request.uri == "/chunked"
            if request.uri == "/validated" {
                // A 304 may declare the length of what it validates; it carries no body.
                response.status = .notModified
                response.body = ""
                response.declaredLength = 600
            }
            return response
        }
        let client = try Self.client(for: origin)
        let budget = ByteBudget(limit: 1000)
        do {
            // Room for it: fetched whole, and every byte given back once the exchange has ended.
            let whole = try await Self.fill(client, "/sized", budget: budget)
            #expect(whole.body.readableBytes == 600)
            #expect(budget.inUse == 0)
            // Other fills hold 500 bytes: a declared 600 does not fit, nor a chunked body that grows past the rest.
            #expect(budget.reserve(500))
            let overBudget = ProxyError(
                .fillBudgetFull,
                "cache fills already hold what upstream.maxBufferedBytes allows (1000 bytes)"
            )
            await #expect(throws: overBudget) { _ = try await Self.fill(client, "/sized", budget: budget) }
            await #expect(throws: overBudget) { _ = try await Self.fill(client, "/chunked", budget: budget) }
            #expect(budget.inUse == 500, "a failed fill gives back what it took")
            budget.release(500)
            let chunked = try await Self.fill(client, "/chunked", budget: budget)
            #expect(chunked.body.readableBytes == 600)
            #expect(budget.inUse == 0)
            // Exchanges that are not fills (queue deliveries) take nothing from any budget.
            #expect(budget.reserve(1000))
            let unbudgeted = try await client.fetch(
                UpstreamRequest(method: .GET, target: "/sized", headers: [:]),
                maxBodyBytes: 1 << 20,
                on: MultiThreadedEventLoopGroup.singleton.next()
            ).get()
            #expect(unbudgeted.body.readableBytes == 600)
            // A 304 holds no body, whatever length it declares: it needs no room.
            let validated = try await Self.fill(client, "/validated", budget: budget)
            #expect(validated.status == .notModified)
            #expect(budget.inUse == 1000)
            budget.release(1000)
        } catch {
            try? await client.shutdown()
            try? await origin.stop()
            throw error
        }
        try await client.shutdown()
        try await origin.stop()
    }
}
