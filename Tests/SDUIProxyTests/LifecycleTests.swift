import Foundation
import NIOCore
import SDUIProxyCore
import Synchronization
import Testing

@testable import SDUIProxy

@Suite("The proxy's services: start and shutdown order")
struct LifecycleTests {
    @Test("shutdown drains the public listener first: a request in flight is answered, admin and delivery run on")
    func shutdownOrder() async throws {
        let gate = OriginGate()
        defer { gate.open() }
        let directory = WriteQueueProxyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await ProxyHarness.run(
            origin: { request in
                request.uri == "/held"
                    ? .component(heldBy: gate) : TestOrigin.Response(status: .created, headers: [], body: "ok")
            },
            configure: { $0.queue = WriteQueueProxyTests.queueConfiguration(directory: directory) }
        ) { proxy async throws in
            let server = proxy.server
            let queue = try #require(server.context.writeQueue)
            let connection = try await RawConnection(port: server.publicPort)
            try await connection.send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
            try await waitUntil { proxy.origin.requests(to: "/held").count == 1 }

            let finished = Atomic(false)
            let shutdown = Task {
                await server.shutdown(drainTimeout: .seconds(20))
                finished.store(true, ordering: .relaxed)
            }
            try await waitUntil { !server.publicListener.isAcceptingConnections }
            // The public listener drains, held by the request in flight; the services after it still run.
            #expect(server.adminListener.isAcceptingConnections)
            let ready = try await proxy.admin("/ready")
            #expect(ready.status == .serviceUnavailable)
            #expect(ready.body.contains(#""draining":true"#), "\(ready.body)")
            // Queue delivery still delivers what is queued meanwhile.
            _ = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: #"{"n":1}"#))
            try await waitUntil { queue.depth == 0 }
            #expect(proxy.origin.requests(to: "/api/orders").count == 1)
            let finishedEarly = finished.load(ordering: .relaxed)
            #expect(!finishedEarly)

            // The request in flight is answered in full; only then do the other services stop.
            gate.open()
            let response = try #require(try await connection.readResponse())
            #expect(response.head.hasPrefix("HTTP/1.1 200"))
            #expect(response.body.contains("beagle:screenComponent"))
            await shutdown.value
            #expect(!server.isAcceptingConnections)
            // Delivery has stopped and the store is closed: nothing is taken any more.
            await #expect(throws: ProxyError.self) {
                _ = try await queue.enqueue(QueueTest.request(.POST, "/api/orders", body: #"{"n":2}"#))
            }
        }
    }

    @Test("a listener that cannot bind stops the services already started, and start throws why")
    func portInUse() async throws {
        let directory = WriteQueueProxyTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await ProxyHarness.run { running async throws in
            let taken = running.server.publicPort
            var configuration = ProxyHarness.testConfiguration(upstream: running.origin.url)
            configuration.listen.port = taken
            configuration.queue = WriteQueueProxyTests.queueConfiguration(directory: directory)
            configuration.prefetch.urls = ["/screens/warm"]
            let before = running.origin.requestCount

            let error = await #expect(throws: ProxyStartupError.self) {
                _ = try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
            }
            #expect(
                error?.message.hasPrefix("cannot listen on 127.0.0.1:\(taken): ") == true,
                "\(String(describing: error))"
            )
            // start throws once the other services have stopped: the warm-up never sent anything, since the
            // proxy never listened, and the queue's store was closed, so another proxy can open it at once.
            #expect(running.origin.requestCount == before)
            configuration.listen.port = 0
            let next = try await ProxyServer.start(configuration: configuration, logger: ProxyHarness.logger)
            #expect(next.publicPort != 0)
            try await waitUntil { running.origin.requests(to: "/screens/warm").count == 3 }
            await next.shutdown(drainTimeout: .seconds(2))
        }
    }
}
