import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The exchange's decisions, driven directly: heads routed by a real ``RequestRouter``, bodies counted against
/// their limits, and what each end hands back. No wire is involved.
@Suite("One request's exchange, whatever wire carries it")
struct RequestExchangeTests {
    private let loop = EmbeddedEventLoop()

    /// A router with a queued route under `/orders/` (bodies up to 8 bytes) and a streaming route under `/api/`.
    private static let router: RequestRouter = {
        var configuration = ProxyConfiguration()
        var streaming = configuration.cache.policy
        streaming.bypass = true
        streaming.stream = true
        configuration.cache.routes.append(.init(prefix: "/api/", policy: streaming))
        var queue = QueueConfiguration()
        queue.maxBodyBytes = 8
        queue.routes = [.init(method: "POST", pathPrefix: "/orders/")]
        return RequestRouter(configuration: configuration, queue: queue)
    }()

    private static let reporting = CacheReporting(ProxyConfiguration().cache)

    private static func head(
        _ method: HTTPMethod,
        _ uri: String,
        version: HTTPVersion = .http1_1,
        _ fields: [(String, String)] = []
    ) -> HTTPRequestHead {
        HTTPRequestHead(
            version: version,
            method: method,
            uri: uri,
            headers: HTTPHeaders([("Host", "app.example")] + fields)
        )
    }

    private func start(
        _ exchange: inout RequestExchange,
        _ head: HTTPRequestHead
    ) -> RequestExchange.HeadAction {
        exchange.headReceived(
            head,
            route: Self.router.route(head),
            annotate: { Self.reporting.forwarded($0) },
            streamsBody: { Self.router.streamsBody(of: $0) }
        )
    }

    private func buffer() -> RequestBodyBuffer {
        RequestBodyBuffer(eventLoop: loop, memoryLimit: 1 << 20, directory: "/tmp", threadPool: .singleton)
    }

    @Test("a GET is answered by the cache once it has been read; a body it carries is dropped")
    func cacheRequestAnswersAtTheEnd() {
        var exchange = RequestExchange(maxBodyBytes: 4)
        guard case .readBody = start(&exchange, Self.head(.GET, "/screens/home")) else {
            Issue.record("a GET waits for its end")
            return
        }
        guard case .none = exchange.bodyReceived(ByteBuffer(string: "far more than four bytes")) else {
            Issue.record("a cache request's body is not counted or kept")
            return
        }
        guard case .answerFromCache(let request) = exchange.endReceived() else {
            Issue.record("the cache answers at the end")
            return
        }
        #expect(request.target.path == "/screens/home")
        guard case .none = exchange.endReceived() else {
            Issue.record("an exchange answers once")
            return
        }
    }

    @Test(
        "a forward's body: chunked when any transfer coding says so (any case, in a list), else the first length above zero"
    )
    func bodyLengthRules() {
        func length(_ fields: [(String, String)]) -> RequestExchange.BodyLength {
            RequestExchange.bodyLength(
                of: HTTPRequestHead(version: .http1_1, method: .POST, uri: "/", headers: HTTPHeaders(fields))
            )
        }
        #expect(length([]) == .none)
        #expect(length([("Host", "a"), ("Content-Length", "12")]) == .declared(12))
        #expect(length([("content-length", "0")]) == .none)
        #expect(length([("Content-Length", "x"), ("Content-Length", "5")]) == .none, "the first value counts")
        #expect(length([("Transfer-Encoding", "chunked")]) == .unknown)
        #expect(length([("transfer-encoding", "gzip,  Chunked ")]) == .unknown)
        #expect(length([("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]) == .unknown)
        #expect(length([("Transfer-Encoding", "gzip"), ("Content-Length", "3")]) == .declared(3))
        #expect(length([("Content-Length", "3"), ("Transfer-Encoding", "chunked")]) == .unknown)
        #expect(length([("X-Content-Length", "3"), ("Transfer-Encodings", "chunked")]) == .none)
        // A length repeated in a list, which admission and HTTP/2's framing take when its values agree, is that
        // length: read as one number, it was no body at all, and the body was never sent on.
        #expect(length([("content-length", "5,5")]) == .declared(5))
        #expect(length([("Content-Length", "5 , 5"), ("content-length", "5")]) == .declared(5))
    }

    @Test("a forward whose body declares more than limits.maxBodyBytes is refused before any of it is read")
    func declaredTooLargeIsRefusedAtOnce() {
        var exchange = RequestExchange(maxBodyBytes: 4)
        let action = start(&exchange, Self.head(.PUT, "/profile", [("Content-Length", "5")]))
        guard case .refuseAndClose(let error) = action else {
            Issue.record("expected a refusal, got \(action)")
            return
        }
        #expect(error == RequestExchange.bodyTooLarge)
        #expect(error.status == .payloadTooLarge)
    }

    @Test("a buffered body is counted across its parts, and the part past the limit refuses it and lets the buffer go")
    func bufferedBodyPastTheLimit() {
        var exchange = RequestExchange(maxBodyBytes: 6)
        let head = Self.head(.POST, "/profile", [("Transfer-Encoding", "chunked")])
        guard case .buffer(let forward, let sendContinue) = start(&exchange, head) else {
            Issue.record("a forward with a body of unknown length reads it whole first")
            return
        }
        #expect(!sendContinue)
        let taker = buffer()
        exchange.bodyBufferStarted(forward, taker)
        #expect(exchange.isTakingBody(ObjectIdentifier(taker)))
        guard case .buffer(_, let into) = exchange.bodyReceived(ByteBuffer(string: "1234")), into === taker else {
            Issue.record("the first part goes to the buffer")
            return
        }
        guard case .refuseAndClose(let error, let discarded) = exchange.bodyReceived(ByteBuffer(string: "567")) else {
            Issue.record("seven bytes are past a limit of six")
            return
        }
        #expect(error == RequestExchange.bodyTooLarge)
        #expect(discarded === taker)
        #expect(!exchange.isTakingBody(ObjectIdentifier(taker)), "a buffer let go resumes no reading")
        taker.discard()
    }

    @Test("a streamed body past the limit fails its stream, which the forward answers")
    func streamedBodyPastTheLimit() {
        var exchange = RequestExchange(maxBodyBytes: 3)
        let action = start(&exchange, Self.head(.PUT, "/api/upload", [("Transfer-Encoding", "chunked")]))
        guard case .forward(let forward, let length) = action else {
            Issue.record("a streaming route forwards at once, got \(action)")
            return
        }
        #expect(length == .unknown)
        #expect(forward.target.path == "/api/upload")
        let stream = RequestBodyStream(eventLoop: loop, contentLength: nil)
        exchange.bodyStreamStarted(stream)
        #expect(exchange.isStreamingBody)
        guard case .failStream(let failed, let error) = exchange.bodyReceived(ByteBuffer(string: "abcd")) else {
            Issue.record("four bytes are past a limit of three")
            return
        }
        #expect(failed === stream)
        #expect(error == RequestExchange.bodyTooLarge)
        #expect(!exchange.isStreamingBody)
    }

    @Test("a forward without a body is made at once, with nothing to stream, and its end only reads on")
    func forwardWithoutBody() {
        var exchange = RequestExchange(maxBodyBytes: 3)
        guard case .forward(_, let length) = start(&exchange, Self.head(.DELETE, "/profile")) else {
            Issue.record("a forward without a body waits for nothing")
            return
        }
        #expect(length == .none)
        guard case .finishStream(nil) = exchange.endReceived() else {
            Issue.record("no stream to finish")
            return
        }
    }

    @Test("a queued write collects its body up to the route's limit, and is refused past it")
    func queuedWriteCollectsItsBody() {
        var exchange = RequestExchange(maxBodyBytes: 1 << 20)
        guard case .readBody = start(&exchange, Self.head(.POST, "/orders/1", [("Content-Length", "8")])) else {
            Issue.record("a queued write is answered when whole")
            return
        }
        _ = exchange.bodyReceived(ByteBuffer(string: "1234"))
        _ = exchange.bodyReceived(ByteBuffer(string: "5678"))
        guard case .respondToQueuedWrite(let write) = exchange.endReceived() else {
            Issue.record("the queued write responds at the end")
            return
        }
        #expect(String(buffer: write.body) == "12345678")

        guard case .readBody = start(&exchange, Self.head(.POST, "/orders/2", [("Transfer-Encoding", "chunked")]))
        else {
            Issue.record("a queued write of unknown length is read")
            return
        }
        _ = exchange.bodyReceived(ByteBuffer(string: "12345"))
        guard case .refuseAndClose(let error, nil) = exchange.bodyReceived(ByteBuffer(string: "6789")) else {
            Issue.record("nine bytes are past the route's eight")
            return
        }
        #expect(error == RequestRouter.queuedBodyTooLarge(limit: 8))
    }

    @Test("abandoning hands back what takes the body; afterwards nothing does")
    func abandonHandsBackTheTaker() {
        var exchange = RequestExchange(maxBodyBytes: 100)
        guard case .buffer(let forward, _) = start(&exchange, Self.head(.POST, "/profile", [("Content-Length", "9")]))
        else {
            Issue.record("a body is read whole first")
            return
        }
        let taker = buffer()
        exchange.bodyBufferStarted(forward, taker)
        guard case .buffer(let abandoned) = exchange.abandon(), abandoned === taker else {
            Issue.record("the buffer is handed back")
            return
        }
        guard case .nothing = exchange.abandon(), case .none = exchange.endReceived() else {
            Issue.record("an abandoned exchange has nothing left")
            return
        }
        taker.discard()
    }

    @Test("100 Continue is the proxy's to send from HTTP/1.1 on, HTTP/2 included, never to HTTP/1.0")
    func continueByVersion() {
        let expect = [("Expect", "100-continue")]
        #expect(RequestExchange.expectsContinue(Self.head(.PUT, "/a", version: .http1_1, expect)))
        #expect(
            RequestExchange.expectsContinue(Self.head(.PUT, "/a", version: HTTPVersion(major: 2, minor: 0), expect))
        )
        #expect(!RequestExchange.expectsContinue(Self.head(.PUT, "/a", version: .http1_0, expect)))
        #expect(!RequestExchange.expectsContinue(Self.head(.PUT, "/a", version: .http1_1)))
    }
}
