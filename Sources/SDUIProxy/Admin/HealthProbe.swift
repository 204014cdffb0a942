import NIOCore
import SDUIProxyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `GET /health` on an admin listener, for `sdui-proxy health` (the container health check): one blocking
/// exchange on a plain socket, bounded by a deadline, with no event loop to start.
public enum HealthProbe {
    /// Asks `host`:`port` (a name or an address; wildcard addresses are reached on loopback) for `/health`.
    ///
    /// - Returns: nil when the proxy answered 200 with `{"status":"ok"}` within `timeout`, else why not, in one
    ///   line.
    public static func run(host listenerHost: String, port: Int, timeout: Duration) -> String? {
        let host = HealthCheck.probeHost(forListenerHost: listenerHost)
        let display = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let deadline = ContinuousClock.now + timeout
        let socket: Int32
        switch connection(host: host, port: port, deadline: deadline) {
        case .success(let connected): socket = connected
        case .failure(let failure): return "cannot connect to \(display): \(describe(failure, limit: timeout))"
        }
        defer { close(socket) }
        let request = "GET \(HealthCheck.path) HTTP/1.1\r\nHost: \(display)\r\nConnection: close\r\n\r\n"
        if let problem = sendAll(Array(request.utf8), on: socket, deadline: deadline) {
            return "cannot ask \(display): \(describe(problem, limit: timeout))"
        }
        switch receiveResponse(on: socket, deadline: deadline) {
        case .success(let (status, body)):
            return HealthCheck.problem(status: status, body: body).map { "\(display): \($0)" }
        case .failure(let failure):
            return "no answer from \(display): \(describe(failure, limit: timeout))"
        }
    }

    private struct Failure: Error {
        var reason: String
        /// The deadline passed; ``reason`` then says so without the limit, which ``run`` adds.
        var timedOut = false
    }

    /// A connected non-blocking socket to the first address of `host` that accepts.
    private static func connection(host: String, port: Int, deadline: ContinuousClock.Instant) -> Result<Int32, Failure>
    {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = AI_NUMERICSERV
        #if canImport(Darwin)
        hints.ai_socktype = SOCK_STREAM
        #else
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else {
            return .failure(Failure(reason: "cannot resolve \(host) (\(String(cString: gai_strerror(status))))"))
        }
        defer { freeaddrinfo(list) }
        var failure = Failure(reason: "no address")
        var next: UnsafeMutablePointer<addrinfo>? = list
        while let address = next {
            next = address.pointee.ai_next
            let descriptor = socket(
                address.pointee.ai_family,
                address.pointee.ai_socktype,
                address.pointee.ai_protocol
            )
            guard descriptor >= 0 else {
                failure = Failure(reason: describe(errno))
                continue
            }
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
            if connect(descriptor, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 {
                return .success(descriptor)
            }
            var code = errno
            if code == EINPROGRESS {
                switch waitUntilReady(descriptor, for: Int16(POLLOUT), deadline: deadline) {
                case .success:
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    if getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &code, &length) != 0 { code = errno }
                    if code == 0 { return .success(descriptor) }
                case .failure(let timedOut):
                    close(descriptor)
                    return .failure(timedOut)
                }
            }
            close(descriptor)
            failure = Failure(reason: describe(code))
        }
        return .failure(failure)
    }

    private static func sendAll(_ bytes: [UInt8], on socket: Int32, deadline: ContinuousClock.Instant) -> Failure? {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
            if count > 0 {
                sent += count
            } else if count < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR {
                if case .failure(let failure) = waitUntilReady(socket, for: Int16(POLLOUT), deadline: deadline) {
                    return failure
                }
            } else {
                return Failure(reason: describe(errno))
            }
        }
        return nil
    }

    /// Reads one response: its status and body (at most 64 KiB of it).
    private static func receiveResponse(
        on socket: Int32,
        deadline: ContinuousClock.Instant
    ) -> Result<(Int, [UInt8]), Failure> {
        var parser = HTTPResponseParser(maximumHeadBytes: 16 << 10)
        parser.expectResponse(isHEAD: false)
        var buffer = ByteBufferAllocator().buffer(capacity: 4096)
        var status: Int?
        var body: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            do {
                while let part = try parser.next(from: &buffer) {
                    switch part {
                    case .head(let head, _, _): status = Int(head.status.code)
                    case .body(let bytes): body += bytes.readableBytesView.prefix(max(0, (64 << 10) - body.count))
                    case .end: return .success((status ?? 0, body))
                    }
                }
            } catch {
                return .failure(Failure(reason: "not an HTTP response (\(error))"))
            }
            if case .failure(let failure) = waitUntilReady(socket, for: Int16(POLLIN), deadline: deadline) {
                return .failure(failure)
            }
            let count = chunk.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
            if count > 0 {
                buffer.writeBytes(chunk[0..<count])
            } else if count == 0 {
                // The connection closed: the end of a body that runs to the close, or a response cut short.
                do {
                    if case .end? = try parser.finish(), let status { return .success((status, body)) }
                } catch {}
                return .failure(Failure(reason: "the connection closed before a whole response"))
            } else if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                return .failure(Failure(reason: describe(errno)))
            }
        }
    }

    /// Waits until `socket` is ready for `events`, or fails at the deadline.
    private static func waitUntilReady(
        _ socket: Int32,
        for events: Int16,
        deadline: ContinuousClock.Instant
    ) -> Result<Void, Failure> {
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else {
                return .failure(Failure(reason: "timed out", timedOut: true))
            }
            let (seconds, attoseconds) = remaining.components
            let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            var descriptor = pollfd(fd: socket, events: events, revents: 0)
            let ready = poll(&descriptor, 1, milliseconds)
            if ready > 0 { return .success(()) }
            if ready < 0, errno != EINTR { return .failure(Failure(reason: describe(errno))) }
        }
    }

    private static func describe(_ failure: Failure, limit: Duration) -> String {
        guard failure.timedOut else { return failure.reason }
        let (seconds, attoseconds) = limit.components
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return milliseconds % 1000 == 0 ? "timed out after \(seconds) s" : "timed out after \(milliseconds) ms"
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code)).lowercased()
    }
}
