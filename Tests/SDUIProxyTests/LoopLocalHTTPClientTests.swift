import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("The event-loop-local upstream client")
struct LoopLocalHTTPClientTests {
    static func client(
        for origin: TestOrigin,
        // Long: the tests that want a timeout ask for theirs, and on a loaded machine an answer can take seconds.
        timeout: Duration = .seconds(10),
        maxConnections: Int = 4
    ) throws -> LoopLocalHTTPClient {
        guard case .http(let httpOrigin) = try UpstreamOrigin(parsing: origin.url) else { throw CancellationError() }
        var configuration = ProxyConfiguration.Upstream()
        configuration.timeout = timeout
        configuration.maxConnections = maxConnections
        return try LoopLocalHTTPClient(
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
        // What is tested is reuse, not the timeout: far above what a loaded machine takes to answer.
        let client = try Self.client(for: origin, timeout: .seconds(10))
        try await Self.shuttingDown(client) {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            for index in 0..<20 {
                let response = try await Self.get(client, "/r/\(index)", loop: loop)
                #expect(response.status == .ok)
            }
            #expect(origin.requestCount == 20)
            #expect(origin.acceptedConnections == 1)
            #expect(origin.requests.allSatisfy { $0.headers.first(name: "host") == "127.0.0.1:\(origin.port)" })
        }
        try await origin.stop()
    }

    @Test(
        "a body arrives whole in one read or in several; one kept from a read stays intact as the connection reads on"
    )
    func bodiesAcrossReads() async throws {
        let small = String(repeating: "small-0123456789", count: 120)
        let split = String(repeating: "split-0123456789", count: 200)
        let large = String(repeating: "large-0123456789", count: 2_600)
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response()
            switch request.uri {
            case "/split":
                response.body = split
                response.bodyPieces = 3
            case "/large": response.body = large
            default: response.body = request.uri + small
            }
            return response
        }
        let client = try Self.client(for: origin)
        try await Self.shuttingDown(client) {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            let first = try await Self.get(client, "/a", loop: loop)
            let pieces = try await Self.get(client, "/split", loop: loop)
            let big = try await Self.get(client, "/large", loop: loop)
            let second = try await Self.get(client, "/b", loop: loop)
            #expect(String(buffer: first.body) == "/a" + small)
            #expect(String(buffer: pieces.body) == split)
            #expect(String(buffer: big.body) == large)
            #expect(big.body.readableBytes > UpstreamConnectionHandler.maximumBorrowedBodyBytes)
            #expect(String(buffer: second.body) == "/b" + small)
            #expect(origin.acceptedConnections == 1)
        }
        try await origin.stop()
    }

    @Test("every loop of the group and loops outside it get a pool; after shutdown none opens a connection")
    func poolsAndShutdown() async throws {
        let origin = try await TestOrigin { _ in .component() }
        let client = try Self.client(for: origin)
        let outside = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // A loop the client sees only after it shut down.
        let late = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        loops.append(outside.next())
        // Everything is shut down whatever fails: a client or group left running would end the test process.
        do {
            for (index, loop) in loops.enumerated() {
                #expect(try await Self.get(client, "/p/\(index)", loop: loop).status == .ok)
            }
            #expect(origin.acceptedConnections == loops.count)
        } catch {
            Issue.record(error)
        }
        try await client.shutdown()
        for loop in loops + [late.next()] {
            await #expect(throws: ProxyError.self) { _ = try await Self.get(client, "/after", loop: loop) }
        }
        #expect(origin.requestCount == loops.count)
        #expect(origin.acceptedConnections == loops.count)
        try await late.shutdownGracefully()
        try await outside.shutdownGracefully()
        try await origin.stop()
    }

    @Test("a keep-alive connection the backend closed is replaced, and the request still succeeds")
    func staleConnection() async throws {
        let origin = try await TestOrigin { _ in .component() }
        let client = try Self.client(for: origin)
        try await Self.shuttingDown(client) {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            _ = try await Self.get(client, "/a", loop: loop)
            await origin.closeOpenConnections()
            let again = try await Self.get(client, "/b", loop: loop)
            #expect(again.status == .ok)
            #expect(origin.acceptedConnections == 2)
        }
        try await origin.stop()
    }

    @Test("failures map onto the error model: too large, timeout, unreachable")
    func failures() async throws {
        // `/slow` is answered only when the test is done with it: however late its loop runs, it times out.
        let gate = OriginGate()
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response.component(extra: #","pad":"\#(String(repeating: "p", count: 4000))""#)
            if request.uri == "/slow" { response.heldBy = gate }
            return response
        }
        // Only the exchange that is meant to time out gets a short timeout: on a loaded machine, the others can
        // take a second.
        let client = try Self.client(for: origin, timeout: .seconds(10))
        let impatient = try Self.client(for: origin, timeout: .seconds(1))
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        try await Self.shuttingDown(client, impatient) {
            await #expect(throws: ProxyError(.upstreamTooLarge, "the backend's response is larger than 100 bytes")) {
                _ = try await Self.get(client, "/big", loop: loop, maxBodyBytes: 100)
            }
            do {
                _ = try await Self.get(impatient, "/slow", loop: loop)
                Issue.record("expected a timeout")
            } catch let error as ProxyError {
                #expect(error.kind == .timeout)
            }
            gate.open()
            try await origin.stop()
            do {
                _ = try await Self.get(client, "/down", loop: loop)
                Issue.record("expected a network error")
            } catch let error as ProxyError {
                #expect(error.kind == .network)
            }
        }
    }

    /// Runs `body`, then shuts `clients` down even when `body` fails: a client left running would end the whole
    /// test process, and with it every other test's result.
    static func shuttingDown(_ clients: LoopLocalHTTPClient..., after body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch {
            Issue.record(error)
        }
        for client in clients { try await client.shutdown() }
    }

    /// Runs `body` with a client of `origin`, then shuts both down even when `body` fails.
    static func withClient(
        for origin: TestOrigin,
        timeout: Duration,
        maxConnections: Int = 4,
        _ body: (LoopLocalHTTPClient) async throws -> Void
    ) async throws {
        guard case .http(let httpOrigin) = try UpstreamOrigin(parsing: origin.url) else { throw CancellationError() }
        var configuration = ProxyConfiguration.Upstream()
        configuration.timeout = timeout
        configuration.maxConnections = maxConnections
        let client = try LoopLocalHTTPClient(
            origin: httpOrigin,
            configuration: configuration,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton
        )
        // In an end-to-end slot: these tests time the client against a real origin (see EndToEndSlots).
        try await EndToEndSlots.withSlot { try await shuttingDown(client) { try await body(client) } }
        try await origin.stop()
    }

    /// That the deadline is the exchange's own, not what is left of the one before on the connection, is
    /// ``UpstreamConnectionHandlerTests/deadlineOnReusedConnection()``'s, on the loop's clock; here, the timeout
    /// ends an exchange on a reused connection over a real socket, and never before it is due.
    @Test("an exchange on a reused connection that gets no answer times out, no sooner than the timeout")
    func timeoutOnReusedConnection() async throws {
        let gate = OriginGate()
        let origin = try await TestOrigin { request in
            TestOrigin.Response.component(heldBy: request.uri == "/held" ? gate : nil)
        }
        try await Self.withClient(for: origin, timeout: .seconds(1)) { client in
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            _ = try await Self.get(client, "/first", loop: loop)

            let clock = ContinuousClock()
            let started = clock.now
            do {
                _ = try await Self.get(client, "/held", loop: loop)
                Issue.record("expected a timeout")
            } catch let error as ProxyError {
                #expect(error.kind == .timeout)
            }
            #expect(clock.now - started >= .seconds(1))
            #expect(origin.requests.map(\.uri) == ["/first", "/held"])
            #expect(origin.acceptedConnections == 1)
            gate.open()
        }
    }

    @Test("when every connection is busy, an exchange waits for one to come free")
    func fullPool() async throws {
        let origin = try await TestOrigin { request in
            var response = TestOrigin.Response.component()
            if request.uri.hasPrefix("/hold") { response.delay = .milliseconds(100) }
            if request.uri.hasPrefix("/stuck") { response.delay = .seconds(15) }
            return response
        }
        try await Self.withClient(for: origin, timeout: .seconds(5), maxConnections: 2) { client in
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            // Five exchanges on two connections: three of them wait for a connection to come free.
            let responses = try await withThrowingTaskGroup(of: HTTPResponseStatus.self) { group in
                for index in 0..<5 {
                    group.addTask { try await Self.get(client, "/hold/\(index)", loop: loop).status }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(responses == Array(repeating: .ok, count: 5))
            #expect(origin.acceptedConnections == 2)

            // Both connections stuck: a third exchange waits until their timeouts close them, then gets a new
            // connection.
            let stuckSent = ContinuousClock.now
            let stuck = (0..<2).map { index in
                Task { () -> ProxyError.Kind? in
                    do {
                        _ = try await Self.get(client, "/stuck/\(index)", loop: loop)
                        return nil
                    } catch {
                        return (error as? ProxyError)?.kind
                    }
                }
            }
            // Both stuck exchanges hold their connections before the third asks for one.
            try await waitUntil { origin.requests.filter { $0.uri.hasPrefix("/stuck") }.count == 2 }
            // Three seconds between the stuck exchanges' deadlines and the waiting one's, for loaded machines (a
            // stuck exchange's deadline starts when its task runs, which may be after `stuckSent`).
            try await Task.sleep(until: stuckSent + .seconds(3))
            let waited = try await Self.get(client, "/waiting", loop: loop)
            #expect(waited.status == .ok)
            for task in stuck { #expect(await task.value == .timeout) }
            #expect(origin.acceptedConnections == 3)
        }
    }

    @Test("a 304 whose Content-Length is over the body limit is no body at all, and not too large")
    func notModifiedWithLength() async throws {
        let origin = try await TestOrigin { _ in
            var response = TestOrigin.Response(status: .notModified, headers: [], body: "")
            response.declaredLength = 5000
            return response
        }
        try await Self.withClient(for: origin, timeout: .seconds(2)) { client in
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            let response = try await Self.get(client, "/screen", loop: loop, maxBodyBytes: 100)
            #expect(response.status == .notModified)
            #expect(response.body.readableBytes == 0)
        }
    }

    @Test("requests with a body carry it with its length")
    func body() async throws {
        let origin = try await TestOrigin { _ in TestOrigin.Response(status: .created, headers: [], body: "") }
        let client = try Self.client(for: origin)
        try await Self.shuttingDown(client) {
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
        }
        try await origin.stop()
    }

    /// Collects a forwarded response's head and body.
    final class CollectingSink: ForwardedResponseSink, @unchecked Sendable {
        let eventLoop: any EventLoop
        var status: HTTPResponseStatus?
        var body = ""

        init(eventLoop: any EventLoop) {
            self.eventLoop = eventLoop
        }

        func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
            self.status = status
        }

        func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            body += String(buffer: buffer)
            return eventLoop.makeSucceededVoidFuture()
        }

        /// Whether the answer's end reached the sink.
        var ended = false

        func receiveEnd() { ended = true }
    }

    @Test("a forward's completion is called on its loop once the sink has the answer's end; a refusal goes there too")
    func forwardCompletion() async throws {
        let origin = try await TestOrigin { _ in .component() }
        let client = try Self.client(for: origin, timeout: .seconds(10))
        // The body of the refused request streams on a loop of its own group: never the exchange's.
        let elsewhere = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        try await Self.shuttingDown(client) {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            let sink = CollectingSink(eventLoop: loop)
            // Called from the test's task, off the loop: the completion still comes on it.
            let (succeeded, onLoop, ended) = await withCheckedContinuation {
                (done: CheckedContinuation<(Bool, Bool, Bool), Never>) in
                client.forward(
                    UpstreamRequest(method: .GET, target: "/screens/a", headers: [:]),
                    body: nil,
                    on: loop,
                    to: sink
                ) { result in
                    let succeeded = if case .success = result { true } else { false }
                    done.resume(returning: (succeeded, loop.inEventLoop, sink.ended))
                }
            }
            #expect(succeeded && onLoop && ended)
            #expect(origin.requests.map(\.uri) == ["/screens/a"])
            let foreignLoop = elsewhere.next()
            let foreignBody = try await foreignLoop.submit {
                RequestBodyStream(eventLoop: foreignLoop, contentLength: 1)
            }.get()
            let (refused, refusedOnLoop) = await withCheckedContinuation {
                (done: CheckedContinuation<(Bool, Bool), Never>) in
                client.forward(
                    UpstreamRequest(method: .POST, target: "/forms", headers: [:]),
                    body: foreignBody,
                    on: loop,
                    to: CollectingSink(eventLoop: loop)
                ) { result in
                    let refused = if case .failure = result { true } else { false }
                    done.resume(returning: (refused, loop.inEventLoop))
                }
            }
            #expect(refused && refusedOnLoop)
            #expect(origin.requests.count == 1, "the refused request never went out")
        }
        try await elsewhere.shutdownGracefully()
        try await origin.stop()
    }

    @Test("forwarded requests share the pool: bodies with and without a length arrive whole, on one connection")
    func forwarding() async throws {
        let origin = try await TestOrigin { request in
            TestOrigin.Response(status: .ok, headers: [], body: "got " + String(buffer: request.body))
        }
        let client = try Self.client(for: origin, timeout: .seconds(10))
        try await Self.shuttingDown(client) {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            for (index, length) in [5, nil].enumerated() {
                let sink = CollectingSink(eventLoop: loop)
                try await loop.flatSubmit {
                    let body = RequestBodyStream(eventLoop: loop, contentLength: length)
                    let sent = client.forward(
                        UpstreamRequest(method: .PUT, target: "/forms/\(index)", headers: ["Content-Length": "5"]),
                        body: body,
                        on: loop,
                        to: sink
                    )
                    _ = body.append(ByteBuffer(string: "he"))
                    _ = body.append(ByteBuffer(string: "llo"))
                    body.finish()
                    return sent
                }.get()
                try await loop.submit {
                    #expect(sink.status == .ok)
                    #expect(sink.body == "got hello")
                }.get()
            }
            // A fill after them takes the same connection.
            #expect(try await Self.get(client, "/r", loop: loop).status == .ok)
            let requests = origin.requests
            #expect(requests.map(\.uri) == ["/forms/0", "/forms/1", "/r"])
            #expect(requests[0].headers["content-length"] == ["5"])
            #expect(requests[1].headers["content-length"].isEmpty, "a body without a length is sent in chunks")
            #expect(requests[1].headers["transfer-encoding"] == ["chunked"])
            #expect(origin.acceptedConnections == 1)
        }
        try await origin.stop()
    }

    @Test("a body that fails while its request waits for a connection answers at once; the connection stays whole")
    func bodyFailsWhileWaiting() async throws {
        let gate = OriginGate()
        let origin = try await TestOrigin { request in
            request.uri == "/held" ? .component(heldBy: gate) : .component()
        }
        let client = try Self.client(for: origin, timeout: .seconds(30), maxConnections: 1)
        try await Self.shuttingDown(client) {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            // The pool's one connection is busy with a fill the origin holds.
            let held = client.fetch(
                UpstreamRequest(method: .GET, target: "/held", headers: [:]),
                maxBodyBytes: 1 << 20,
                on: loop
            )
            try await waitUntil(timeout: .seconds(10)) { origin.requestCount == 1 }
            let tooLarge = ProxyError(.tooLarge, "the request body exceeds limits.maxBodyBytes")
            let forwarded = try await loop.submit {
                let body = RequestBodyStream(eventLoop: loop, contentLength: 100)
                let sent = client.forward(
                    UpstreamRequest(method: .POST, target: "/forms", headers: [:]),
                    body: body,
                    on: loop,
                    to: CollectingSink(eventLoop: loop)
                )
                body.fail(tooLarge)
                return sent
            }.get()
            // Answered while the fill still holds the connection: not after upstream.timeout, nor once it is free.
            await #expect(throws: tooLarge) { try await forwarded.get() }
            gate.open()
            #expect(try await held.get().status == .ok)
            #expect(try await Self.get(client, "/after", loop: loop).status == .ok)
            #expect(origin.requests.map(\.uri) == ["/held", "/after"], "the given-up request never went out")
            #expect(origin.acceptedConnections == 1, "the connection it would have had was left whole")
        }
        try await origin.stop()
    }
}
