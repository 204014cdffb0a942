import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// What a queued request sends to the backend on each delivery.
@Suite struct QueueEntryTests {
    private let start = QueueInstant(millisecondsSinceEpoch: 1_000_000)

    @Test(
        "deliveries carry the client's one Idempotency-Key, else the queue id, and no framing headers",
        arguments: [(["client-chosen"], "client-chosen"), ([], "abc"), (["one", "two"], "abc"), ([""], "abc")]
    )
    func deliveriesCarryAnIdempotencyKeyAndNoFramingHeaders(clientKeys: [String], sent: String) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "2")
        for key in clientKeys { headers.add(name: "Idempotency-Key", value: key) }
        headers.add(name: "X-Custom", value: "kept")
        let entry = QueueEntry(
            id: "abc",
            route: "POST /api",
            method: .POST,
            target: "/api?x=1",
            headers: headers,
            body: ByteBuffer(string: "{}"),
            enqueuedAt: start,
            nextAttemptAt: start
        )
        let request = entry.upstreamRequest
        #expect(request.headers["Idempotency-Key"] == [sent])
        #expect(request.headers.contains(name: "Content-Length") == false)
        #expect(request.headers.first(name: "X-Custom") == "kept")
        #expect(request.target == "/api?x=1")
        #expect(request.body == ByteBuffer(string: "{}"))
    }
}
