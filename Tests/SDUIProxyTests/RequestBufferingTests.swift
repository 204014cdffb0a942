import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Forwarded request bodies are read whole before a backend connection is taken")
struct RequestBufferingTests {
    /// A new empty directory for spool files, removed with what is left in it after `body`.
    static func withSpoolDirectory(_ body: (String) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("sdui-proxy-spool-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await body(directory)
    }

    static func files(in directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    }

    /// `count` bytes of every value, in an order that shows a part moved or dropped.
    static func pattern(_ count: Int) -> ByteBuffer {
        var buffer = ByteBuffer()
        var state: UInt32 = 0x2545_F491
        for _ in 0..<count {
            state = state &* 1_664_525 &+ 1_013_904_223
            buffer.writeInteger(UInt8(truncatingIfNeeded: state >> 24))
        }
        return buffer
    }

    static let answerWithLength: TestOrigin.Responder = { request in
        TestOrigin.Response(status: .created, headers: [], body: "got \(request.body.readableBytes)")
    }

    static func spooling(into directory: String) -> @Sendable (inout ProxyConfiguration) -> Void {
        { configuration in
            configuration.limits.requestBufferBytes = 1024
            configuration.limits.requestBufferDirectory = directory
        }
    }

    @Test(
        "a body larger than limits.requestBufferBytes goes to a file, reaches the backend byte for byte, and the file goes"
    )
    func spooledBodyArrivesWhole() async throws {
        try await Self.withSpoolDirectory { directory in
            try await ProxyHarness.run(origin: Self.answerWithLength, configure: Self.spooling(into: directory)) {
                proxy async throws in
                let body = Self.pattern(300 * 1024)
                let connection = try await RawConnection(port: proxy.server.publicPort)
                // In chunks, without a length: the backend gets it with one.
                try await connection.send("POST /api/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
                var rest = body
                let first = rest.readSlice(length: 200 * 1024)!
                try await connection.send(ByteBuffer(string: String(first.readableBytes, radix: 16) + "\r\n"))
                try await connection.send(first)
                try await connection.send("\r\n")
                // Past the memory limit, the body is in a file while the rest has yet to come.
                try await waitUntil { Self.files(in: directory).count == 1 }
                let name = try #require(Self.files(in: directory).first)
                #expect(name.hasPrefix(RequestSpoolFile.namePrefix), "named by the proxy, not after the request")
                #expect(proxy.origin.acceptedConnections == 0, "the backend hears nothing before the body is whole")
                try await connection.send(ByteBuffer(string: String(rest.readableBytes, radix: 16) + "\r\n"))
                try await connection.send(rest)
                try await connection.send("\r\n0\r\n\r\n")
                let answer = try #require(try await connection.readResponse())
                #expect(answer.head.hasPrefix("HTTP/1.1 201 Created\r\n"), "\(answer.head)")
                #expect(answer.body == "got \(body.readableBytes)")
                let seen = try #require(proxy.origin.requests.first)
                #expect(seen.body == body, "byte for byte")
                #expect(seen.headers["content-length"] == ["\(body.readableBytes)"])
                #expect(seen.headers["transfer-encoding"].isEmpty)
                try await waitUntil { Self.files(in: directory).isEmpty }
                await connection.close()
            }
        }
    }

    @Test("a body within limits.requestBufferBytes is kept in memory: no file, and the backend gets it whole")
    func smallBodyInMemory() async throws {
        try await Self.withSpoolDirectory { directory in
            try await ProxyHarness.run(origin: Self.answerWithLength, configure: Self.spooling(into: directory)) {
                proxy async throws in
                let reply = try await proxy.get("/api/form", method: .PUT, body: String(repeating: "a", count: 1000))
                #expect(reply.status == .created)
                #expect(reply.body == "got 1000")
                #expect(Self.files(in: directory).isEmpty)
                #expect(proxy.origin.requests.first?.headers["content-length"] == ["1000"])
            }
        }
    }

    @Test("the file of a body the client abandons goes, and the backend never hears of the request")
    func clientAbortRemovesTheFile() async throws {
        try await Self.withSpoolDirectory { directory in
            try await ProxyHarness.run(origin: Self.answerWithLength, configure: Self.spooling(into: directory)) {
                proxy async throws in
                let connection = try await RawConnection(port: proxy.server.publicPort)
                try await connection.send("POST /api/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 307200\r\n\r\n")
                try await connection.send(Self.pattern(100 * 1024))
                try await waitUntil { Self.files(in: directory).count == 1 }
                await connection.close()
                try await waitUntil { Self.files(in: directory).isEmpty }
                #expect(proxy.origin.acceptedConnections == 0)
                #expect(proxy.origin.requestCount == 0)
            }
        }
    }

    @Test("the file of a body whose forward fails (the backend is down) goes once the client has its 502")
    func backendFailureRemovesTheFile() async throws {
        try await Self.withSpoolDirectory { directory in
            try await ProxyHarness.run(origin: Self.answerWithLength, configure: Self.spooling(into: directory)) {
                proxy async throws in
                try await proxy.origin.stop()
                let connection = try await RawConnection(port: proxy.server.publicPort)
                try await connection.send("POST /api/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 204800\r\n\r\n")
                try await connection.send(Self.pattern(150 * 1024))
                try await waitUntil { Self.files(in: directory).count == 1 }
                try await connection.send(Self.pattern(50 * 1024))
                let answer = try #require(try await connection.readResponse())
                #expect(answer.head.hasPrefix("HTTP/1.1 502 "), "\(answer.head)")
                try await waitUntil { Self.files(in: directory).isEmpty }
                await connection.close()
            }
        }
    }

    @Test(
        "a body over limits.maxBodyBytes gets 413, declared or not, and the backend sees no request",
        arguments: [
            "POST /api/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
            "POST /api/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        ]
    )
    func overTheLimit(head: String) async throws {
        try await Self.withSpoolDirectory { directory in
            let configure: @Sendable (inout ProxyConfiguration) -> Void = { configuration in
                Self.spooling(into: directory)(&configuration)
                configuration.limits.maxBodyBytes = 64 * 1024
            }
            try await ProxyHarness.run(origin: Self.answerWithLength, configure: configure) { proxy async throws in
                let connection = try await RawConnection(port: proxy.server.publicPort)
                try await connection.send(head)
                if head.contains("chunked") {
                    // The proxy may answer and close while the rest is still being sent: that is what it is for.
                    let part = Self.pattern(40 * 1024)
                    for _ in 0..<2 {
                        try? await connection.send(ByteBuffer(string: String(part.readableBytes, radix: 16) + "\r\n"))
                        try? await connection.send(part)
                        try? await connection.send("\r\n")
                    }
                }
                let answer = try #require(try await connection.readResponse())
                #expect(answer.head.hasPrefix("HTTP/1.1 413 "), "\(answer.head)")
                #expect(answer.body.contains("limits.maxBodyBytes"))
                try await waitUntil { Self.files(in: directory).isEmpty }
                #expect(proxy.origin.acceptedConnections == 0)
                #expect(proxy.origin.requestCount == 0)
                await connection.close()
            }
        }
    }

    @Test("a route with stream: true still streams: the backend has the request before its body is whole")
    func streamedRouteStreams() async throws {
        try await Self.withSpoolDirectory { directory in
            let configure: @Sendable (inout ProxyConfiguration) -> Void = { configuration in
                Self.spooling(into: directory)(&configuration)
                var policy = configuration.cache.policy
                policy.bypass = true
                policy.stream = true
                configuration.cache.routes.append(.init(prefix: "/uploads/", policy: policy))
            }
            try await ProxyHarness.run(behind: RawOrigin.componentOrNoContent, configure: configure) {
                proxy,
                origin async throws in
                let half = ByteBuffer(repeating: UInt8(ascii: "v"), count: 100 * 1024)
                let connection = try await RawConnection(port: proxy.server.publicPort)
                try await connection.send("POST /uploads/video HTTP/1.1\r\nHost: x\r\nContent-Length: 204800\r\n\r\n")
                try await connection.send(half)
                // The backend reads the head while half the body has yet to be sent; no file is made.
                try await waitUntil { origin.headsSeen == ["POST /uploads/video"] }
                #expect(Self.files(in: directory).isEmpty)
                try await connection.send(half)
                let answer = try #require(try await connection.readResponse(bodyless: true))
                #expect(answer.head.hasPrefix("HTTP/1.1 204 "), "\(answer.head)")
                #expect(origin.bodies.first?.utf8.count == 204_800)
                await connection.close()
            }
        }
    }

    @Test("Expect: 100-continue on a body read whole is answered by the proxy; the backend sees no Expect")
    func expectContinue() async throws {
        try await ProxyHarness.run(origin: Self.answerWithLength) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send(
                "POST /api/form HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            )
            let proceed = try #require(try await connection.readResponse(bodyless: true))
            #expect(proceed.head == "HTTP/1.1 100 Continue")
            #expect(proxy.origin.acceptedConnections == 0)
            try await connection.send("hello")
            let answer = try #require(try await connection.readResponse())
            #expect(answer.head.hasPrefix("HTTP/1.1 201 Created\r\n"))
            let seen = try #require(proxy.origin.requests.first)
            #expect(String(buffer: seen.body) == "hello")
            #expect(seen.headers["expect"].isEmpty)
            await connection.close()
        }
    }

    // MARK: - Slow uploads and cache misses

    /// Holds a slow upload open: a POST that declares 1000 bytes and sends one, again each time the proxy answers
    /// (its 408 when `limits.requestTimeout` runs out) and closes, until the task is cancelled; at most `rounds`
    /// times. Counts each upload in `sent` once its head and byte are sent; returns how many it opened.
    static func holdSlowUpload(port: Int, rounds: Int, sent: NIOLockedValueBox<Int>) async throws -> Int {
        var opened = 0
        while opened < rounds, !Task.isCancelled {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port).get()
            opened += 1
            do {
                try await withTaskCancellationHandler {
                    try await channel.writeAndFlush(
                        ByteBuffer(string: "POST /anything HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
                    )
                    sent.withLockedValue { $0 += 1 }
                    // Whatever the proxy answers, the connection ends with it.
                    try await channel.closeFuture.get()
                } onCancel: {
                    channel.close(promise: nil)
                }
            } catch ChannelError.ioOnClosedChannel {
                // Closed before the upload was written: by the cancellation that ends the test (the loop stops), or
                // by the proxy cutting the connection off, which an upload answers by opening another.
                continue
            }
        }
        return opened
    }

    @Test("150 slow uploads held open starve no cache miss, and the backend never hears of them")
    func slowUploadsStarveNoMiss() async throws {
        let configure: @Sendable (inout ProxyConfiguration) -> Void = { configuration in
            // Two loops of 32 backend connections: 150 uploads are more than twice what either pool holds.
            configuration.eventLoops.count = 2
            configuration.upstream.maxConnections = 32
            // Uploads are cut after five seconds and reopened: held for the misses' whole run, without a churn of
            // 150 new connections a second that would crowd the suites running beside this one. The backend's own
            // timeout stays the harness's: what shows an upload holding a backend connection is the backend seeing
            // one, checked below, not how long a miss waited.
            configuration.limits.requestTimeout = .seconds(5)
        }
        try await ProxyHarness.run(
            origin: { request in request.uri == "/anything" ? Self.answerWithLength(request) : .component() },
            configure: configure
        ) { proxy async throws in
            let port = proxy.server.publicPort
            let sent = NIOLockedValueBox(0)
            try await withThrowingTaskGroup(of: Int.self) { uploads in
                for _ in 0..<150 {
                    uploads.addTask { try await Self.holdSlowUpload(port: port, rounds: 50, sent: sent) }
                }
                // Every upload has sent its head and first byte (reopened ones count again).
                try await waitUntil(timeout: .seconds(30)) { sent.withLockedValue { $0 } >= 150 }
                for index in 0..<20 {
                    let miss = try await proxy.get("/screens/miss-\(index)")
                    #expect(miss.status == .ok, "miss \(index): \(miss.body)")
                    #expect(miss["X-Cache"] == "MISS")
                }
                uploads.cancelAll()
                var opened = 0
                for try await count in uploads { opened += count }
                #expect(opened >= 150)
            }
            let seen = proxy.origin.requests
            #expect(seen.count == 20)
            #expect(!seen.contains { $0.uri == "/anything" }, "an upload whose body never came reached the backend")
            // Every miss went over the fills' connections; no upload had one opened for it.
            #expect(proxy.origin.acceptedConnections <= 20)
        }
    }
}
