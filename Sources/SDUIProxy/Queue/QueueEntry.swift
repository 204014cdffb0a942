import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// A queued request as the store holds it, with its delivery state so far.
public struct QueueEntry: Sendable {
    /// The queue id, also the `Idempotency-Key` of each delivery.
    public var id: String
    /// The key of the route it was queued under (`POST /api/orders`).
    public var route: String
    /// The request method.
    public var method: HTTPMethod
    /// The target relative to the backend's base (`/api/orders?x=1`).
    public var target: String
    /// The headers as queued (before the delivery adds `Idempotency-Key`).
    public var headers: HTTPHeaders
    /// The whole body, nil when there is none.
    public var body: ByteBuffer?
    /// When it was queued.
    public var enqueuedAt: QueueInstant
    /// Attempts made so far.
    public var attempts: Int
    /// The earliest time of the next attempt.
    public var nextAttemptAt: QueueInstant
    /// Why the last attempt failed.
    public var lastError: String?
    /// The backend's status in the last attempt, when it answered.
    public var lastStatus: Int?
    /// The local identifier of the entity it creates, on a `creates` route.
    public var localId: LocalIdentifier?
    /// The creates (queue ids) whose local identifiers it names: it is not sent before each has an outcome, and
    /// then with their backend identifiers in place of the local ones.
    public var dependsOn: [String]

    /// An entry with the given fields.
    public init(
        id: String,
        route: String,
        method: HTTPMethod,
        target: String,
        headers: HTTPHeaders,
        body: ByteBuffer?,
        enqueuedAt: QueueInstant,
        attempts: Int = 0,
        nextAttemptAt: QueueInstant,
        lastError: String? = nil,
        lastStatus: Int? = nil,
        localId: LocalIdentifier? = nil,
        dependsOn: [String] = []
    ) {
        self.id = id
        self.route = route
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.enqueuedAt = enqueuedAt
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.lastStatus = lastStatus
        self.localId = localId
        self.dependsOn = dependsOn
    }

    /// The request sent to the backend for this entry: its headers without framing headers, with an
    /// `Idempotency-Key` (``setIdempotencyKey(in:queueID:)``).
    var upstreamRequest: UpstreamRequest {
        var headers = self.headers
        headers.remove(name: "Content-Length")
        headers.remove(name: "Transfer-Encoding")
        Self.setIdempotencyKey(in: &headers, queueID: id)
        return UpstreamRequest(method: method, target: target, headers: headers, body: body)
    }

    /// Gives a write its `Idempotency-Key`: the client's own, when it sent one, so that the backend recognises
    /// the client's retries of it (a retry after a lost 202 is a new queue entry); else the queue id. Several
    /// keys say nothing clear, and are replaced by the queue id.
    static func setIdempotencyKey(in headers: inout HTTPHeaders, queueID: String) {
        let clientKeys = headers["idempotency-key"]
        guard clientKeys.count != 1 || clientKeys[0].isEmpty else { return }
        headers.replaceOrAdd(name: "Idempotency-Key", value: queueID)
    }

    /// Headers as the stores keep them: for each field, the name's and the value's length (UInt32) and bytes.
    static func encode(_ headers: HTTPHeaders) -> ByteBuffer {
        var buffer = ByteBuffer()
        for (name, value) in headers {
            buffer.writeInteger(UInt32(name.utf8.count))
            buffer.writeString(name)
            buffer.writeInteger(UInt32(value.utf8.count))
            buffer.writeString(value)
        }
        return buffer
    }

    /// The headers ``encode(_:)`` wrote.
    static func decodeHeaders(_ blob: ByteBuffer?) throws -> HTTPHeaders {
        guard var buffer = blob else { return HTTPHeaders() }
        var headers = HTTPHeaders()
        while buffer.readableBytes > 0 {
            guard let nameLength = buffer.readInteger(as: UInt32.self),
                let name = buffer.readString(length: Int(nameLength)),
                let valueLength = buffer.readInteger(as: UInt32.self),
                let value = buffer.readString(length: Int(valueLength))
            else { throw QueueStoreError("stored headers are truncated") }
            headers.add(name: name, value: value)
        }
        return headers
    }
}

/// Where a queued request stands, as `GET /queue/ID` reports it.
public struct QueueEntryStatus: Sendable, Equatable {
    /// Where a request is in its life.
    public enum State: String, Sendable, Equatable {
        /// Waiting for its first or next attempt.
        case pending
        /// The backend answered 2xx or 3xx.
        case delivered
        /// Given up: a status that is not retried, or the attempts or the age ran out.
        case failed
        /// Never sent: a create it depends on failed.
        case dependencyFailed
    }

    /// The queue id.
    public var id: String
    /// The route key (`POST /api/orders`).
    public var route: String
    /// The request method.
    public var method: String
    /// The request target (`/api/orders?x=1`).
    public var target: String
    /// Pending, delivered or failed.
    public var state: State
    /// Delivery attempts made.
    public var attempts: Int
    /// When it was queued.
    public var enqueuedAt: QueueInstant
    /// For a pending request: when it is tried next.
    public var nextAttemptAt: QueueInstant?
    /// For a delivered or failed request: when that was decided.
    public var finishedAt: QueueInstant?
    /// The backend's status: the delivering answer, or the last one for a failed request (nil if it never
    /// answered).
    public var status: Int?
    /// Why the last attempt failed, or why the request was given up.
    public var lastError: String?
    /// For a create: the client's local identifier, and the backend's once delivered.
    public var localId: String?
    public var remoteId: String?
    /// For a write that names local identifiers: the creates it waits for (while pending), or the one whose
    /// failure failed it.
    public var waitsFor: [String] = []
    public var failedCreate: String?

    /// A status with the given fields.
    public init(
        id: String,
        route: String,
        method: String,
        target: String,
        state: State,
        attempts: Int,
        enqueuedAt: QueueInstant,
        nextAttemptAt: QueueInstant? = nil,
        finishedAt: QueueInstant? = nil,
        status: Int? = nil,
        lastError: String? = nil
    ) {
        self.id = id
        self.route = route
        self.method = method
        self.target = target
        self.state = state
        self.attempts = attempts
        self.enqueuedAt = enqueuedAt
        self.nextAttemptAt = nextAttemptAt
        self.finishedAt = finishedAt
        self.status = status
        self.lastError = lastError
    }

    /// The JSON body of `GET /.sdui/queue/ID` on the public listener: where the write stands, for the client that
    /// sent it. Only the outcome: no route, method or target (a query can carry what the client would not show),
    /// no error text (it can name the backend's insides), and never the headers or the body.
    public var publicJSON: String { jsonObject(forOperator: false) }

    /// The JSON body of `GET /queue/ID` on the admin listener: the outcome, with the write's route, method and
    /// target and the last error.
    public var json: String { jsonObject(forOperator: true) }

    private func jsonObject(forOperator: Bool) -> String {
        var fields = [#""id":\#(JSONText.quoted(id))"#]
        if forOperator {
            fields += [
                #""route":\#(JSONText.quoted(route))"#,
                #""method":\#(JSONText.quoted(method))"#,
                #""target":\#(JSONText.quoted(target))"#,
            ]
        }
        fields += [
            #""state":"\#(state.rawValue)""#,
            #""attempts":\#(attempts)"#,
            #""enqueuedAt":"\#(enqueuedAt)""#,
        ]
        if let nextAttemptAt { fields.append(#""nextAttemptAt":"\#(nextAttemptAt)""#) }
        if let finishedAt { fields.append(#""finishedAt":"\#(finishedAt)""#) }
        if let status { fields.append(#""status":\#(status)"#) }
        if forOperator, let lastError { fields.append(#""lastError":\#(JSONText.quoted(lastError))"#) }
        if let localId {
            fields.append(#""localId":\#(JSONText.quoted(localId))"#)
            fields.append(#""remoteId":\#(remoteId.map(JSONText.quoted) ?? "null")"#)
        }
        if state == .pending, !waitsFor.isEmpty {
            fields.append(#""waitsFor":[\#(waitsFor.map(JSONText.quoted).joined(separator: ","))]"#)
        }
        if let failedCreate { fields.append(#""failedCreate":\#(JSONText.quoted(failedCreate))"#) }
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// The pending requests of one route, as `GET /queue` reports them.
public struct QueueRouteDepth: Sendable, Equatable {
    /// The route key (`POST /api/orders`).
    public var route: String
    /// Requests waiting for delivery.
    public var depth: Int
    /// When the oldest of them was queued.
    public var oldestEnqueuedAt: QueueInstant?

    /// The depth of `route`.
    public init(route: String, depth: Int, oldestEnqueuedAt: QueueInstant?) {
        self.route = route
        self.depth = depth
        self.oldestEnqueuedAt = oldestEnqueuedAt
    }
}
