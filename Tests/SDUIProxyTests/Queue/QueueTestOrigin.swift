import NIOCore
import NIOHTTP1
import Synchronization

/// The queue tests' view of a ``TestOrigin``: requests with their body as text and the status they were
/// answered with, and behaviour that sees the request head, its body and how many requests came before it.
final class QueueTestOrigin: Sendable {
    struct Request: Sendable {
        var method: HTTPMethod
        var uri: String
        var headers: HTTPHeaders
        var body: String
        /// The status it was answered with.
        var status: Int
        var idempotencyKey: String? { headers.first(name: "Idempotency-Key") }
    }

    struct Reply: Sendable {
        var status: HTTPResponseStatus
        var delay: TimeAmount = .zero
        var body: String = "{}"
        /// Answer only once this gate is open.
        var heldBy: OriginGate?
        /// A `Location` header to answer with.
        var location: String?
    }

    private let origin: TestOrigin
    private let counter = RequestCounter()

    /// Counts the requests the behaviour has seen.
    private final class RequestCounter: Sendable {
        private let count = Mutex(0)

        func next() -> Int {
            count.withLock { count in
                defer { count += 1 }
                return count
            }
        }
    }

    private init(origin: TestOrigin) {
        self.origin = origin
    }

    /// Starts an origin on an ephemeral port that answers 200 until told otherwise.
    static func start() async throws -> QueueTestOrigin {
        let origin = QueueTestOrigin(origin: try await TestOrigin { _ in TestOrigin.Response(body: "{}") })
        origin.setBehaviour { _, _, _ in Reply(status: .ok) }
        return origin
    }

    /// How the origin answers: the request head, its body and the number of requests before it.
    func setBehaviour(_ behaviour: @escaping @Sendable (HTTPRequestHead, String, Int) -> Reply) {
        origin.setResponder { [counter] request in
            let before = counter.next()
            let head = HTTPRequestHead(
                version: .http1_1,
                method: request.method,
                uri: request.uri,
                headers: request.headers
            )
            let reply = behaviour(head, String(buffer: request.body), before)
            var response = TestOrigin.Response(status: reply.status, body: reply.body)
            response.delay = reply.delay
            response.heldBy = reply.heldBy
            if let location = reply.location { response.headers.append(("Location", location)) }
            return response
        }
    }

    /// Starts listening again on the same port.
    func start() async throws { try await origin.restart() }

    /// Stops listening and closes every open connection: clients see the origin as down.
    func stop() async throws { try await origin.stop() }

    var port: Int { origin.port }
    var url: String { origin.url }
    var inFlight: Int { origin.inFlight }
    var maxInFlight: Int { origin.maxInFlight }

    var requests: [Request] {
        origin.requests.map {
            Request(
                method: $0.method,
                uri: $0.uri,
                headers: $0.headers,
                body: String(buffer: $0.body),
                status: Int($0.status.code)
            )
        }
    }

    /// Requests that were answered with 2xx.
    var successfulRequests: [Request] { requests.filter { (200..<300).contains($0.status) } }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback port nothing answers on, for as long as this value lives: a socket is bound to it but never
/// listens, so connections are refused and no other test's server can be given the port. (A port freed by
/// stopping an origin can be handed to another test's listener at once, which then answers.)
final class RefusingPort: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw CancellationError() }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
            }
        }
        guard bound else {
            close(descriptor)
            throw CancellationError()
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}
