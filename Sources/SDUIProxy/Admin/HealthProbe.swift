import AsyncHTTPClient
import NIOCore
import SDUIProxyCore

/// `GET /health` on an admin listener, for `sdui-proxy health` (the container health check): one exchange
/// through AsyncHTTPClient's shared client, bounded by a deadline.
public enum HealthProbe {
    /// Asks `host`:`port` (a name or an address; wildcard addresses are reached on loopback) for `/health`.
    ///
    /// - Parameter token: the admin token, sent as `Authorization: Bearer` when given (the probes are open unless
    ///   `admin.probesOpen` is false).
    /// - Returns: nil when the proxy answered 200 with `{"status":"ok"}` within `timeout`, else why not, in one
    ///   line.
    public static func run(
        host listenerHost: String,
        port: Int,
        timeout: Duration,
        token: String? = nil
    ) async -> String? {
        let host = HealthCheck.probeHost(forListenerHost: listenerHost)
        let display = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let deadline = NIODeadline.now() + TimeAmount(timeout)
        var request = HTTPClientRequest(url: "http://\(display)\(HealthCheck.path)")
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        do {
            let response = try await HTTPClient.shared.execute(request, deadline: deadline)
            let body = try await response.body.collect(upTo: 64 << 10)
            return HealthCheck.problem(status: Int(response.status.code), body: Array(buffer: body))
                .map { "\(display): \($0)" }
        } catch let error as HTTPClientError
            where [.deadlineExceeded, .readTimeout, .connectTimeout].contains(error) || deadline <= .now()
        {
            return "no answer from \(display): timed out after \(describe(timeout))"
        } catch {
            return "cannot ask \(display): \(UpstreamFailureReason.reason(for: error))"
        }
    }

    /// `2 s`, or `1500 ms` when the limit is not whole seconds.
    private static func describe(_ limit: Duration) -> String {
        let (seconds, attoseconds) = limit.components
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return milliseconds % 1000 == 0 ? "\(seconds) s" : "\(milliseconds) ms"
    }
}
