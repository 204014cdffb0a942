import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Misses are held whole in memory to be validated and stored; `upstream.maxResponseBytes` bounds each, and
/// `upstream.maxBufferedBytes` all of them together. Past either, a client's GET is streamed, not stored.
@Suite("Bounded memory on the miss path")
struct BufferedMissTests {
    static let big = String(repeating: "0123456789abcdef", count: 20_000)  // 320,000 bytes

    static func origin(_ request: TestOrigin.Request) -> TestOrigin.Response {
        var response = TestOrigin.Response(headers: [("Content-Type", "text/plain"), ("Cache-Control", "max-age=60")])
        response.body = request.uri.hasPrefix("/big") ? big : "small"
        response.chunked = request.uri.hasSuffix("chunked")
        return response
    }

    @Test(
        "a response over upstream.maxResponseBytes reaches the client whole, streamed, and is not stored",
        arguments: ["/big/sized", "/big/chunked"]
    )
    func overMaxResponseBytes(path: String) async throws {
        try await ProxyHarness.run(origin: Self.origin, configure: { $0.upstream.maxResponseBytes = 64 << 10 }) {
            proxy async throws in
            for _ in 0..<2 {
                let reply = try await proxy.get(path)
                #expect(reply.status == .ok)
                let replyWhole = reply.body == Self.big
                #expect(replyWhole, "the whole body, \(reply.body.count) bytes of \(Self.big.count)")
                #expect(reply.headers.first(name: "X-Cache") == "BYPASS")
            }
            // The first fill gave up at the limit and the answer was forwarded; the key is marked, so the second
            // request is forwarded without a fill that would be cut off again. Nothing was stored.
            #expect(proxy.origin.requests(to: path).count == 3)
            #expect(proxy.server.context.fetcher.bufferBudget?.inUse == 0)
            // A response within the limits is stored as ever.
            #expect(try await proxy.get("/small").headers.first(name: "X-Cache") == "MISS")
            #expect(try await proxy.get("/small").headers.first(name: "X-Cache") == "HIT")
        }
    }

    @Test("a directory backend's file over upstream.maxResponseBytes is refused, not read whole to stream it")
    func directoryBackendRefuses() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sdui-big-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data(Self.big.utf8).write(to: directory.appendingPathComponent("big.txt"))
        try await ProxyHarness.run(
            origin: Self.origin,
            configure: {
                $0.upstream.url = "file:\(directory.path)"
                $0.upstream.maxResponseBytes = 64 << 10
            }
        ) { proxy async throws in
            let reply = try await proxy.get("/big.txt")
            #expect(reply.status == .badGateway)
            let refused = reply.body.contains(#""kind":"upstreamTooLarge""#)
            #expect(refused, "the error model's upstreamTooLarge")
        }
    }

    @Test("a miss that would take the fills past upstream.maxBufferedBytes is streamed, not stored")
    func overMaxBufferedBytes() async throws {
        try await ProxyHarness.run(
            origin: Self.origin,
            configure: {
                $0.upstream.maxResponseBytes = 512 << 10
                $0.upstream.maxBufferedBytes = 512 << 10
            }
        ) { proxy async throws in
            let budget = try #require(proxy.server.context.fetcher.bufferBudget)
            #expect(budget.limit == 512 << 10)
            // Other fills hold all but 100 KiB: the 320,000-byte answer does not fit, and streams.
            #expect(budget.reserve(budget.limit - (100 << 10)))
            let streamed = try await proxy.get("/big/sized")
            #expect(streamed.status == .ok)
            let streamedWhole = streamed.body == Self.big
            #expect(streamedWhole, "the whole body, \(streamed.body.count) bytes of \(Self.big.count)")
            #expect(streamed.headers.first(name: "X-Cache") == "BYPASS")
            // Room again: the same answer is held, stored, and then a hit.
            budget.release(budget.limit - (100 << 10))
            #expect(try await proxy.get("/big/sized").headers.first(name: "X-Cache") == "MISS")
            let hit = try await proxy.get("/big/sized")
            #expect(hit.headers.first(name: "X-Cache") == "HIT")
            let hitWhole = hit.body == Self.big
            #expect(hitWhole, "the whole body, \(hit.body.count) bytes of \(Self.big.count)")
            #expect(budget.inUse == 0)
        }
    }

    /// An origin whose answers to `/big` wait for a gate of their own, request by request, so a test knows which
    /// exchange is in flight.
    final class GatedBigOrigin: Sendable {
        let gates = [OriginGate(), OriginGate(), OriginGate()]
        private let seen = NIOLockedValueBox(0)

        func respond(_ request: TestOrigin.Request) -> TestOrigin.Response {
            var response = BufferedMissTests.origin(request)
            guard request.uri.hasPrefix("/big") else { return response }
            let number = seen.withLockedValue { count in
                defer { count += 1 }
                return count
            }
            response.heldBy = gates[min(number, gates.count - 1)]
            // In pieces, so the answer streams over several reads.
            response.bodyPieces = 8
            return response
        }
    }

    @Test("concurrent misses of a key known to be too large share one backend request, streamed to each whole")
    func markedKeyMissesShareOneStream() async throws {
        let gated = GatedBigOrigin()
        gated.gates[0].open()
        try await ProxyHarness.run(origin: gated.respond, configure: { $0.upstream.maxResponseBytes = 64 << 10 }) {
            proxy async throws in
            // The first miss marks the key too large (its fill, then its stream: the first two requests).
            gated.gates[1].open()
            #expect(try await proxy.get("/big/sized").body == Self.big)
            #expect(proxy.origin.requests(to: "/big/sized").count == 2)

            let streams = proxy.server.context.fetcher.sharedStreams
            try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<6 { group.addTask { try await proxy.get("/big/sized") } }
                // All six have joined the one stream, and its request has reached the origin, which holds the answer
                // (joining is done before the request is on its way: the two are waited for separately).
                try await waitUntil { streams.load == (1, 6) }
                try await waitUntil { proxy.origin.requests(to: "/big/sized").count == 3 }
                gated.gates[2].open()
                var statuses: [String] = []
                for try await reply in group {
                    #expect(reply.status == .ok)
                    #expect(reply.headers.first(name: "X-Cache") == "BYPASS")
                    let whole = reply.body == Self.big
                    #expect(whole, "the whole body, \(reply.body.count) bytes of \(Self.big.count)")
                    statuses.append(reply.headers.first(name: "Cache-Status") ?? "")
                }
                // RFC 9211: the five that joined the first one's exchange say so.
                #expect(statuses.filter { $0.hasSuffix("; collapsed") }.count == 5, "\(statuses)")
                #expect(statuses.allSatisfy { $0.hasPrefix("sdui-proxy; fwd=uri-miss; fwd-status=200") }, "\(statuses)")
            }
            #expect(proxy.origin.requests(to: "/big/sized").count == 3)
            // The stream is let go when its exchange completes, which the clients' last bytes may come before.
            try await waitUntil { streams.load == (0, 0) }
        }
    }

    @Test("the waiters of a fill that turns out too large share the stream that replaces it")
    func waitersOfATooLargeFillShareOneStream() async throws {
        let gated = GatedBigOrigin()
        try await ProxyHarness.run(origin: gated.respond, configure: { $0.upstream.maxResponseBytes = 64 << 10 }) {
            proxy async throws in
            let context = proxy.server.context
            try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<5 { group.addTask { try await proxy.get("/big/chunked") } }
                // One fill in flight, four waiting for it.
                try await waitUntil { context.fetcher.coalescer.coalescedWaits == 4 }
                gated.gates[0].open()
                // The fill gave up at the limit; all five wait on the one stream the origin now holds.
                try await waitUntil { context.fetcher.sharedStreams.load == (1, 5) }
                gated.gates[1].open()
                for try await reply in group {
                    #expect(reply.status == .ok)
                    #expect(reply.headers.first(name: "X-Cache") == "BYPASS")
                    let whole = reply.body == Self.big
                    #expect(whole, "the whole body, \(reply.body.count) bytes of \(Self.big.count)")
                }
            }
            #expect(proxy.origin.requests(to: "/big/chunked").count == 2)
        }
    }

    @Test("a conditional request does not join a shared stream: it is forwarded alone, with its own validators")
    func conditionalRequestsGoAlone() async throws {
        let gated = GatedBigOrigin()
        gated.gates[0].open()
        gated.gates[1].open()
        try await ProxyHarness.run(origin: gated.respond, configure: { $0.upstream.maxResponseBytes = 64 << 10 }) {
            proxy async throws in
            _ = try await proxy.get("/big/sized")
            let streams = proxy.server.context.fetcher.sharedStreams
            async let plain = proxy.get("/big/sized")
            try await waitUntil { streams.load == (1, 1) }
            async let conditional = proxy.get("/big/sized", headers: [("If-None-Match", "\"v1\"")])
            try await waitUntil { proxy.origin.requests(to: "/big/sized").count == 4 }
            // Its own request, beside the plain one's (which may reach the origin first or second).
            let conditions = proxy.origin.requests(to: "/big/sized").dropFirst(2).map {
                $0.headers.first(name: "If-None-Match")
            }
            #expect(conditions.contains("\"v1\""))
            #expect(conditions.contains(nil))
            #expect(streams.load == (1, 1))
            gated.gates[2].open()
            #expect(try await plain.body == Self.big)
            #expect(try await conditional.status == .ok)
        }
    }

    @Test("clients with other cookies do not share a stream; a stream whose answer sets a cookie is not shared")
    func privateAnswersAreNotShared() async throws {
        let gated = GatedBigOrigin()
        gated.gates[0].open()
        gated.gates[1].open()
        let setsCookie = NIOLockedValueBox(false)
        try await ProxyHarness.run(
            origin: { request in
                var response = gated.respond(request)
                if setsCookie.withLockedValue({ $0 }) { response.headers.append(("Set-Cookie", "session=new")) }
                return response
            },
            configure: { $0.upstream.maxResponseBytes = 64 << 10 }
        ) { proxy async throws in
            _ = try await proxy.get("/big/sized")
            let streams = proxy.server.context.fetcher.sharedStreams
            // Two users: two streams, two requests at the origin, each with its own cookie.
            async let first = proxy.get("/big/sized", headers: [("Cookie", "user=1")])
            async let second = proxy.get("/big/sized", headers: [("Cookie", "user=2")])
            try await waitUntil { streams.load == (2, 2) && proxy.origin.requests(to: "/big/sized").count == 4 }
            let cookies = proxy.origin.requests(to: "/big/sized").dropFirst(2).compactMap {
                $0.headers.first(name: "cookie")
            }
            #expect(cookies.sorted() == ["user=1", "user=2"])
            gated.gates[2].open()
            #expect(try await first.body == Self.big)
            #expect(try await second.body == Self.big)

            // An answer that sets a cookie goes to the first client only; the other two ask the backend alone.
            setsCookie.withLockedValue { $0 = true }
            let before = proxy.origin.requests(to: "/big/sized").count
            let replies = try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<3 { group.addTask { try await proxy.get("/big/sized") } }
                return try await group.reduce(into: [ProxyHarness.Reply]()) { $0.append($1) }
            }
            #expect(replies.allSatisfy { $0.body == Self.big && $0["Set-Cookie"] == "session=new" })
            #expect(proxy.origin.requests(to: "/big/sized").count - before == 3)
        }
    }

    @Test("a backend that fails before the head fails every client of the shared stream, with the error model")
    func failureBeforeTheHeadReachesEveryClient() async throws {
        let gated = GatedBigOrigin()
        gated.gates[0].open()
        gated.gates[1].open()
        try await ProxyHarness.run(
            origin: gated.respond,
            configure: {
                $0.upstream.maxResponseBytes = 64 << 10
                // Long enough for all three to join on a loaded machine; the origin holds the answer past it.
                $0.upstream.timeout = .seconds(3)
            }
        ) { proxy async throws in
            _ = try await proxy.get("/big/sized")
            let streams = proxy.server.context.fetcher.sharedStreams
            try await withThrowingTaskGroup(of: ProxyHarness.Reply.self) { group in
                for _ in 0..<3 { group.addTask { try await proxy.get("/big/sized") } }
                try await waitUntil { streams.load == (1, 3) }
                // The origin holds the answer past upstream.timeout.
                for try await reply in group {
                    #expect(reply.status == .gatewayTimeout)
                    #expect(reply.body.contains(#""kind":"timeout""#))
                }
            }
            #expect(streams.load == (0, 0))
            gated.gates[2].open()
        }
    }
}
