import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// A request to the admin listener, read whole.
public struct AdminRequest: Sendable {
    public var method: HTTPMethod
    public var path: String
    /// Query parameters, percent-decoded; a name that repeats keeps its first value.
    public var query: [String: String]
    /// The query as it came, after the `?`; nil without one.
    public var rawQuery: String? = nil
    public var headers: HTTPHeaders
    public var body: ByteBuffer?
}

/// A response from an admin endpoint: a status and a body, JSON unless ``contentType`` says otherwise.
public struct AdminResponse: Sendable {
    public var status: HTTPResponseStatus
    /// The body text (JSON for every endpoint but the few that answer in another format, like `/metrics`).
    public var json: String
    /// The `Content-Type` of the body.
    public var contentType = "application/json"
    /// Fields beyond the ones every admin answer has (`Allow` on a 405).
    public var headers: [(name: String, value: String)] = []

    public init(status: HTTPResponseStatus = .ok, json: String) {
        self.status = status
        self.json = json
    }

    /// A response whose body is not JSON, such as the Prometheus text format.
    public init(status: HTTPResponseStatus = .ok, contentType: String, body: String) {
        self.status = status
        self.json = body
        self.contentType = contentType
    }

    public init(_ error: ProxyError) {
        self.init(status: error.status, json: error.jsonBody())
    }
}

/// The admin endpoints, by method and exact path.
public struct AdminRouter: Sendable {
    public typealias Endpoint = @Sendable (AdminRequest, any EventLoop) -> EventLoopFuture<AdminResponse>

    private var endpoints: [String: [String: Endpoint]] = [:]
    /// Endpoints that take every path under a prefix (`/queue/ID`), tried when no exact path matches.
    private var prefixEndpoints: [(prefix: String, method: String, endpoint: Endpoint)] = []

    public init() {}

    /// Adds an endpoint for every path that starts with `prefix`; the endpoint reads the rest of the path.
    public mutating func register(_ method: HTTPMethod, prefix: String, _ endpoint: @escaping Endpoint) {
        prefixEndpoints.append((prefix, method.rawValue, endpoint))
    }

    /// Adds an endpoint; a later one for the same method and path replaces the earlier.
    public mutating func register(_ method: HTTPMethod, _ path: String, _ endpoint: @escaping Endpoint) {
        endpoints[path, default: [:]][method.rawValue] = endpoint
    }

    /// Answers `request`: its endpoint's response, 404 for an unknown path, 405 for a known path with
    /// another method.
    func respond(to request: AdminRequest, on eventLoop: any EventLoop) -> EventLoopFuture<AdminResponse> {
        guard let byMethod = endpoints[request.path] else {
            if let match = prefixEndpoints.first(where: {
                request.path.hasPrefix($0.prefix) && request.path.count > $0.prefix.count
            }) {
                guard match.method == request.method.rawValue else {
                    return eventLoop.makeSucceededFuture(Self.methodNotAllowed(request.path, allowed: [match.method]))
                }
                return match.endpoint(request, eventLoop)
            }
            return eventLoop.makeSucceededFuture(
                AdminResponse(ProxyError(.notFound, "no admin endpoint \(request.path)"))
            )
        }
        guard let endpoint = byMethod[request.method.rawValue] ?? (request.method.isHEAD ? byMethod["GET"] : nil)
        else {
            // HEAD is answered wherever GET is.
            let allowed = byMethod.keys.sorted() + (byMethod["GET"] != nil && byMethod["HEAD"] == nil ? ["HEAD"] : [])
            return eventLoop.makeSucceededFuture(Self.methodNotAllowed(request.path, allowed: allowed))
        }
        return endpoint(request, eventLoop)
    }

    /// 405 with the `Allow` field RFC 9110 section 15.5.6 requires.
    private static func methodNotAllowed(_ path: String, allowed: [String]) -> AdminResponse {
        let list = allowed.joined(separator: ", ")
        var response = AdminResponse(ProxyError(.methodNotAllowed, "\(path) takes \(list)"))
        response.headers = [("Allow", list)]
        return response
    }
}
