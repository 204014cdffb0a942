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

    @Test("a create's outcome names both identifiers, a dependent's the create that failed it; the receipt its creates")
    func identifiersInOutcomesAndReceipts() {
        let created = QueueOutcomeEvent(
            id: "c1",
            route: "POST /api/orders",
            outcome: .delivered,
            status: 201,
            attempts: 1,
            localId: "tmp-7f3a",
            remoteId: "R1"
        )
        #expect(created.json.hasSuffix(#""attempts":1,"localId":"tmp-7f3a","remoteId":"R1"}"#))
        let failed = QueueOutcomeEvent(
            id: "d1",
            route: "PUT /api/orders",
            outcome: .dependencyFailed,
            status: nil,
            attempts: 0,
            error: "the create failed",
            failedCreate: "c1"
        )
        #expect(failed.json.contains(#""outcome":"dependencyFailed""#))
        #expect(failed.json.hasSuffix(#""error":"the create failed","failedCreate":"c1"}"#))
        let receipt = QueueReceipt(id: "d1", route: "PUT /api/orders", location: "/.sdui/queue/d1", waitsFor: ["c1"])
        #expect(receipt.json == #"{"queued":true,"id":"d1","location":"/.sdui/queue/d1","waitsFor":["c1"]}"#)
        #expect(!QueueReceipt(id: "x", route: "r", location: "/l").json.contains("waitsFor"))
    }
}
