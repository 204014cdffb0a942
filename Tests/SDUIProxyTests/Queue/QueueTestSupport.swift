import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxy
import SDUIProxyCore
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Shared pieces of the queue tests: temporary store directories, clients, routes and a way to run the
/// delivery service and stop it gracefully.
enum QueueTest {
    static let logger = Logger(label: "queue-test", factory: { _ in SwiftLogNoOpLogHandler() })

    /// A pending POST as a store keeps it, due when queued, with headers that test the encoding: a repeated field
    /// and an empty value.
    static func entry(
        _ id: String,
        route: String = "POST /api",
        at time: QueueInstant,
        body: ByteBuffer? = nil
    )
        -> QueueEntry
    {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "X-Tag", value: "a")
        headers.add(name: "X-Tag", value: "b")
        headers.add(name: "X-Empty", value: "")
        return QueueEntry(
            id: id,
            route: route,
            method: .POST,
            target: "/api/\(id)?q=1",
            headers: headers,
            body: body,
            enqueuedAt: time,
            nextAttemptAt: time
        )
    }
    static let group = MultiThreadedEventLoopGroup.singleton

    /// A queue over the store in `configuration.store`, on the shared test loops and thread pool.
    static func openQueue(_ configuration: QueueConfiguration) async throws -> WriteQueue {
        try await WriteQueue.open(
            configuration: configuration,
            threadPool: .singleton,
            eventLoop: group.next(),
            logger: logger
        )
    }

    /// A fresh directory under the system's temporary directory.
    static func makeDirectory() -> String {
        let temporary = FileManager.default.temporaryDirectory.appendingPathComponent("sdui-queue-test-XXXXXX")
        var template = Array(temporary.path.utf8CString)
        let path = template.withUnsafeMutableBufferPointer { buffer in
            mkdtemp(buffer.baseAddress!).map { String(cString: $0) }
        }
        return path!
    }

    static func removeDirectory(_ path: String) {
        for name in ["queue.sqlite", "queue.sqlite-wal", "queue.sqlite-shm", "queue.lock"] {
            unlink(path + "/" + name)
        }
        rmdir(path)
    }

    /// A fast retry policy for tests.
    static func retry(
        maxAttempts: Int = 50,
        backoff: Duration = .milliseconds(20),
        maxBackoff: Duration = .milliseconds(50),
        maxAge: Duration = .seconds(60)
    ) -> QueueConfiguration.RetryPolicy {
        QueueConfiguration.RetryPolicy(
            maxAttempts: maxAttempts,
            backoff: backoff,
            maxBackoff: maxBackoff,
            maxAge: maxAge
        )
    }

    static func configuration(
        directory: String,
        routes: [QueueConfiguration.Route],
        handlers: [QueueConfiguration.Handler] = [],
        maxDepth: Int = 1000,
        maxBodyBytes: Int = 1 << 20,
        concurrency: Int = 16
    ) -> QueueConfiguration {
        var configuration = QueueConfiguration()
        configuration.store = directory
        configuration.routes = routes
        configuration.handlers = handlers
        configuration.maxDepth = maxDepth
        configuration.maxBodyBytes = maxBodyBytes
        configuration.concurrency = concurrency
        return configuration
    }

    /// An upstream client for the origin at `port`: a short connect timeout, and ten seconds for an answer, which a
    /// loaded machine may need when the origin delays it by one or two.
    static func client(port: Int) throws -> LoopLocalHTTPClient {
        guard case .http(let origin) = try UpstreamOrigin(parsing: "http://127.0.0.1:\(port)") else {
            fatalError("not an http origin")
        }
        var upstream = ProxyConfiguration.Upstream()
        upstream.connectTimeout = .seconds(1)
        upstream.timeout = .seconds(10)
        return try LoopLocalHTTPClient(origin: origin, configuration: upstream, eventLoopGroup: group)
    }

    static func request(
        _ method: HTTPMethod = .POST,
        _ target: String,
        body: String? = nil,
        headers: [(String, String)] = []
    ) -> QueuedRequest {
        var fields = HTTPHeaders()
        fields.add(name: "Content-Type", value: "application/json")
        for (name, value) in headers { fields.add(name: name, value: value) }
        return QueuedRequest(method: method, target: target, headers: fields, body: body.map { ByteBuffer(string: $0) })
    }

    /// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
    static func waitUntil(
        timeout: Duration = .seconds(10),
        _ condition: @Sendable () async -> Bool
    ) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        while clock.now < deadline {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return await condition()
    }

    /// Runs `service` in a service group while `body` runs, then shuts it down gracefully and waits for it.
    static func withRunningService<T>(
        _ service: QueueDeliveryService,
        _ body: () async throws -> T
    ) async throws -> T {
        let serviceGroup = ServiceGroup(
            configuration: .init(services: [service], gracefulShutdownSignals: [], logger: logger)
        )
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await serviceGroup.run() }
            do {
                let result = try await body()
                await serviceGroup.triggerGracefulShutdown()
                try await group.waitForAll()
                return result
            } catch {
                await serviceGroup.triggerGracefulShutdown()
                try? await group.waitForAll()
                throw error
            }
        }
    }

    /// The `GET /queue/ID` answer for `id`, decoded.
    static func status(_ queue: WriteQueue, _ id: String) async -> EntryStatus {
        let response = await queue.status(id: id)
        return EntryStatus(httpStatus: Int(response.status.code), fields: json(response.json))
    }

    struct EntryStatus {
        var httpStatus: Int
        var fields: [String: Any]
        var state: String? { fields["state"] as? String }
        var attempts: Int? { fields["attempts"] as? Int }
        var status: Int? { fields["status"] as? Int }
        var lastError: String? { fields["lastError"] as? String }
    }

    /// A JSON object as a dictionary (empty when it is not one).
    static func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }
}
