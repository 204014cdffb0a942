import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// A write the backend could not take now, handed to ``WriteQueue/enqueue(_:)`` to be delivered later.
///
/// It is what the proxy would have sent upstream: method, normalised target, the headers it built and the
/// whole body in memory (at most `queue.maxBodyBytes`).
public struct QueuedRequest: Sendable {
    /// The request method.
    public var method: HTTPMethod
    /// The request target relative to the backend's base (`/api/orders?x=1`), already normalised.
    public var target: String
    /// The headers sent upstream; framing headers (`Content-Length`, `Transfer-Encoding`) are recomputed on
    /// delivery, and `Idempotency-Key` is set to the queue id unless the client sent one.
    public var headers: HTTPHeaders
    /// The whole body, nil when there is none.
    public var body: ByteBuffer?
    /// Why forwarding the request at once failed, when it was tried: it becomes the entry's last error, and
    /// the first delivery waits one backoff of the route. Nil when the request was not tried yet (the first
    /// delivery is then immediate). That try is not counted in the route's `maxAttempts`.
    public var failure: String?
    /// The queue id to use, or nil for a new one. Pass ``WriteQueue/newID()`` here when the immediate forward
    /// already carried it as `Idempotency-Key`, so the backend can tell a delivery of the same request; it must
    /// be a header token of at most 128 characters.
    public var id: String?
    /// On a `creates` route: the local identifier of the entity it creates.
    public var localId: LocalIdentifier?
    /// The tokens it names that may be local identifiers (``WriteQueue/IdentifierPlan/names``): the store makes
    /// it depend on the creates among them.
    public var names: [LocalIdentifier]

    /// A request to queue, with why forwarding it at once failed (nil when it was not tried).
    public init(
        method: HTTPMethod,
        target: String,
        headers: HTTPHeaders,
        body: ByteBuffer? = nil,
        failure: String? = nil,
        id: String? = nil,
        localId: LocalIdentifier? = nil,
        names: [LocalIdentifier] = []
    ) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.failure = failure
        self.id = id
        self.localId = localId
        self.names = names
    }

    /// The request as built for the backend, with why forwarding it failed and the id it carried.
    public init(
        _ request: UpstreamRequest,
        failure: String? = nil,
        id: String? = nil,
        localId: LocalIdentifier? = nil,
        names: [LocalIdentifier] = []
    ) {
        self.init(
            method: request.method,
            target: request.target,
            headers: request.headers,
            body: request.body,
            failure: failure,
            id: id,
            localId: localId,
            names: names
        )
    }

    /// The target's path, without the query.
    var path: String {
        target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? target
    }
}

/// What the client is told when its request was queued: `202 Accepted`, ``json`` as the body and ``location``
/// in the `Location` header.
public struct QueueReceipt: Sendable, Equatable {
    /// The queue id; deliveries carry it as `Idempotency-Key`.
    public var id: String
    /// The key of the route it was queued under (`POST /api/orders`).
    public var route: String
    /// The path of its status (`/queue/ID`).
    public var location: String
    /// The creates (queue ids) whose local identifiers it names: it is sent after them, with their backend
    /// identifiers.
    public var waitsFor: [String]

    /// A receipt with the given fields.
    public init(id: String, route: String, location: String, waitsFor: [String] = []) {
        self.id = id
        self.route = route
        self.location = location
        self.waitsFor = waitsFor
    }

    /// `{"queued":true,"id":"...","location":"..."}`, with `"waitsFor":[...]` when it names creates.
    public var json: String {
        let waits = waitsFor.isEmpty ? "" : #","waitsFor":[\#(waitsFor.map(JSONText.quoted).joined(separator: ","))]"#
        return #"{"queued":true,"id":\#(JSONText.quoted(id)),"location":\#(JSONText.quoted(location))\#(waits)}"#
    }

    /// The status of the response to the client.
    public var status: HTTPResponseStatus { .accepted }
}

/// A cache invalidation asked for by a queue handler.
public enum InvalidationRequest: Sendable, Equatable, CustomStringConvertible {
    /// Entries whose target (`path?query`) is under this prefix, by whole path segments (``PathPrefix``).
    case prefix(String)
    /// Entries carrying this tag.
    case tag(String)

    /// The (hard) invalidation of the cache it stands for.
    public var cacheInvalidation: CacheInvalidation {
        switch self {
        case .prefix(let prefix): CacheInvalidation(.prefix(prefix))
        case .tag(let tag): CacheInvalidation(.tag(tag))
        }
    }

    public var description: String {
        switch self {
        case .prefix(let prefix): "prefix \(prefix)"
        case .tag(let tag): "tag \(tag)"
        }
    }
}
