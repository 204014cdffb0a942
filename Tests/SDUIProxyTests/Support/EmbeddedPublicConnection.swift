import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHTTP1
import SDUIProxyCore

@testable import SDUIProxy

/// A ``NetworkClient`` whose backend is the test: it records every exchange it is asked for and answers one only
/// when the test says so, on the thread of the loop it was asked on (an `EmbeddedEventLoop`'s, the test's own).
///
/// A forwarded request's body is read as it arrives, as a real client streams it; a body that fails fails its
/// forward with the same error, as the real clients do.
final class ScriptedNetworkClient: NetworkClient {
    /// A fetch the test has not answered yet.
    private struct PendingFetch {
        let request: UpstreamRequest
        let completion: @Sendable (Result<UpstreamResponse, any Error>) -> Void
    }

    private struct State {
        var fetches: [UpstreamRequest] = []
        var pendingFetches: [PendingFetch] = []
        var forwards: [ScriptedForward] = []
        var readsForwardedBodies = true
    }

    struct NothingToAnswer: Error {}

    /// Whether forwards read their bodies as they arrive; a backend that does not lets them pile up, so the
    /// connection has to stop reading.
    var readsForwardedBodies: Bool {
        get { state.withLockedValue { $0.readsForwardedBodies } }
        set { state.withLockedValue { $0.readsForwardedBodies = newValue } }
    }

    private let state = NIOLockedValueBox(State())

    /// Every fetch asked for, in order, answered or not.
    var fetches: [UpstreamRequest] { state.withLockedValue { $0.fetches } }
    /// Every forward asked for, in order.
    var forwards: [ScriptedForward] { state.withLockedValue { $0.forwards } }

    func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop
    )
        -> EventLoopFuture<UpstreamResponse>
    {
        let promise = eventLoop.makePromise(of: UpstreamResponse.self)
        fetch(request, maxBodyBytes: maxBodyBytes, on: eventLoop) { promise.completeWith($0) }
        return promise.futureResult
    }

    func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (Result<UpstreamResponse, any Error>) -> Void
    ) {
        state.withLockedValue { state in
            state.fetches.append(request)
            state.pendingFetches.append(PendingFetch(request: request, completion: completion))
        }
    }

    /// Answers the oldest fetch still waiting.
    func answerFetch(status: HTTPResponseStatus = .ok, headers: HTTPHeaders, body: String) throws {
        try takeOldestFetch().completion(
            .success(UpstreamResponse(status: status, headers: headers, body: ByteBuffer(string: body)))
        )
    }

    /// Fails the oldest fetch still waiting.
    func failFetch(with error: any Error) throws {
        try takeOldestFetch().completion(.failure(error))
    }

    private func takeOldestFetch() throws -> PendingFetch {
        let fetch = state.withLockedValue { state in
            state.pendingFetches.isEmpty ? nil : state.pendingFetches.removeFirst()
        }
        guard let fetch else { throw NothingToAnswer() }
        return fetch
    }

    func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink
    ) -> EventLoopFuture<Void> {
        let forward = ScriptedForward(request: request, body: body, sink: sink, promise: eventLoop.makePromise())
        let reads = state.withLockedValue { state in
            state.forwards.append(forward)
            return state.readsForwardedBodies
        }
        if reads { forward.readBody() }
        return forward.result
    }

    func shutdown() async throws {}
}

/// One forwarded exchange of a ``ScriptedNetworkClient``: what it was sent, and the test's hand on its answer.
final class ScriptedForward: Sendable {
    let request: UpstreamRequest
    let body: RequestBodyStream?
    let sink: any ForwardedResponseSink
    private let promise: EventLoopPromise<Void>

    private struct Received {
        var body = ByteBuffer()
        var bodyEnded = false
        var completed = false
    }

    private let received = NIOLockedValueBox(Received())

    init(
        request: UpstreamRequest,
        body: RequestBodyStream?,
        sink: any ForwardedResponseSink,
        promise: EventLoopPromise<Void>
    ) {
        self.request = request
        self.body = body
        self.sink = sink
        self.promise = promise
    }

    fileprivate var result: EventLoopFuture<Void> { promise.futureResult }

    /// The body bytes that reached the backend so far.
    var receivedBody: String { received.withLockedValue { String(buffer: $0.body) } }
    /// Whether the body reached its end (a forward without a body has none to end).
    var bodyEnded: Bool { received.withLockedValue { $0.bodyEnded } }

    /// Reads the body part by part as the connection hands it over.
    func readBody() {
        guard let body else { return }
        body.next().whenComplete { result in
            switch result {
            case .success(var part?):
                self.received.withLockedValue { _ = $0.body.writeBuffer(&part) }
                self.readBody()
            case .success(nil):
                self.received.withLockedValue { $0.bodyEnded = true }
            case .failure(let error):
                self.fail(with: error)
            }
        }
    }

    /// The backend answers in full: head (as field lines, with the length its `Content-Length` declares, as the
    /// proxy's client parses it), the body as one part, end.
    func respond(status: HTTPResponseStatus, headers: HTTPHeaders, body: String) {
        guard markCompleted() else { return }
        let bodyLength = headers.first(name: "content-length").flatMap { Int($0) }
        sink.receiveHead(status: status, fields: HTTPFieldLines(headers), bodyLength: bodyLength)
        if !body.isEmpty { _ = sink.receiveBodyPart(ByteBuffer(string: body)) }
        sink.receiveEnd()
        promise.succeed()
    }

    /// The exchange fails with `error` (nothing more happens when it has already ended).
    func fail(with error: any Error) {
        guard markCompleted() else { return }
        promise.fail(error)
    }

    private func markCompleted() -> Bool {
        received.withLockedValue { received in
            defer { received.completed = true }
            return !received.completed
        }
    }
}

/// Counts the reads, writes and flushes that reach it from the handlers behind it: put in front of a handler, it
/// shows whether that handler lets the channel's reads through or holds them back, and how it writes.
final class OutboundCounter: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer

    private(set) var reads = 0
    private(set) var writes = 0
    private(set) var flushes = 0

    func read(context: ChannelHandlerContext) {
        reads += 1
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        writes += 1
        context.write(data, promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        flushes += 1
        context.flush()
    }
}

/// A response the handler wrote, parsed, with the bytes it was parsed from.
struct WrittenResponse {
    let status: HTTPResponseStatus
    let headers: HTTPHeaders
    let body: String
    /// The response exactly as written: head and body.
    let raw: String

    var closesConnection: Bool { headers["connection"].contains { $0.lowercased() == "close" } }
}

/// One connection of the public listener with nothing real under it: a ``PublicHTTPHandler`` on an
/// `EmbeddedChannel`, its context's backend a ``ScriptedNetworkClient``, and an ``OutboundCounter`` in front of it.
/// Everything, the handler's deadlines and the backend's answers included, happens on the test's thread, when the
/// test drives it.
///
/// The handler's deadlines run on the loop's clock, which only the test moves (``advanceClock(to:)``,
/// ``advanceClock(until:within:)``). It starts at the wall clock's time; the cache reads its ages from the loop's
/// clock too (``CacheClock``), so an age grows only when the test moves time.
final class EmbeddedPublicConnection {
    let loop: EmbeddedEventLoop
    let channel: EmbeddedChannel
    let backend = ScriptedNetworkClient()
    let outbound = OutboundCounter()
    /// The connection's loop's count of responses, as the metrics read it.
    let tally = RequestTally()
    let configuration: ProxyConfiguration
    /// The loop's time when the handler was made: no deadline of the handler's comes before this plus its length.
    let start: NIODeadline
    /// Written bytes not yet taken by ``readResponse(isHEAD:)``.
    private var output = ByteBuffer()

    /// Runs `body` with a new connection, and ends the connection afterwards, whatever happened.
    /// - Parameter keepsCompressedForms: stores responses compressed as the configuration's `compression` says
    ///   (every body on the loop, there being no pool); off by default, so heads stay as the other tests expect.
    static func run(
        _ configure: (inout ProxyConfiguration) -> Void = { _ in },
        keepsCompressedForms: Bool = false,
        _ body: (EmbeddedPublicConnection) throws -> Void
    ) throws {
        let connection = try EmbeddedPublicConnection(configure, keepsCompressedForms: keepsCompressedForms)
        defer { connection.finish() }
        try body(connection)
    }

    init(_ configure: (inout ProxyConfiguration) -> Void, keepsCompressedForms: Bool = false) throws {
        var configuration = ProxyConfiguration()
        // Never dialled: the scripted client stands in for the backend.
        configuration.upstream.url = "http://backend.invalid"
        configure(&configuration)
        self.configuration = configuration

        loop = EmbeddedEventLoop()
        loop.advanceTime(to: .now())
        start = loop.now
        channel = EmbeddedChannel(loop: loop)

        let loop = self.loop
        let context = Self.makeContext(
            configuration,
            backend: backend,
            keepsCompressedForms: keepsCompressedForms,
            clock: .following({ loop.now }, calendarSeconds: HTTPDate.now())
        )
        let handler = PublicHTTPHandler(
            runtime: ProxyRuntime(context),
            eventLoop: loop,
            buffers: ResponseBufferRecycler(),
            requests: tally,
            clock: .of(loop)
        )
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(outbound)
        try sync.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40_000)).wait()
    }

    /// A context over a new cache whose backend is `backend`, as a handler on an embedded channel is given.
    static func makeContext(
        _ configuration: ProxyConfiguration,
        backend: ScriptedNetworkClient,
        keepsCompressedForms: Bool = false,
        clock: CacheClock = .system
    ) -> ProxyContext {
        let logger = Logger(label: "handler-tests", factory: { _ in SwiftLogNoOpLogHandler() })
        let cache = ResponseCache(maxBytes: configuration.cache.maxBytes, maxEntries: configuration.cache.maxEntries)
        let metrics = ProxyMetrics()
        let fetcher = ComponentFetcher(
            cache: cache,
            client: backend,
            maxResponseBytes: configuration.upstream.maxResponseBytes,
            platformHeader: configuration.platform.header,
            tagHeader: configuration.cache.tagHeader,
            storageRules: configuration.cache.storageRules,
            computesContentHash: configuration.compat.beagleHash,
            metrics: metrics,
            coalescer: RequestCoalescer(maximumWait: .seconds(6)),
            prefetchPlanner: ProxyContext.prefetchPlanner(for: configuration),
            compression: keepsCompressedForms ? configuration.compression : nil,
            clock: clock,
            logger: logger
        )
        return ProxyContext(
            configuration: configuration,
            cache: cache,
            fetcher: fetcher,
            client: backend,
            metrics: metrics,
            logger: logger
        )
    }

    /// Whether the connection is still open.
    var isOpen: Bool { channel.isActive }

    /// Every response counted so far, whatever its labels.
    var countedResponses: Int {
        (0..<RequestTally.slotCount).reduce(0) { $0 + tally.count(inSlot: $1) }
    }

    /// The responses counted with `statusClass` (`2xx`, `4xx`...).
    func countedResponses(statusClass: String) -> Int {
        (0..<RequestTally.slotCount).filter { RequestTally.labels(ofSlot: $0).statusClass == statusClass }
            .reduce(0) { $0 + tally.count(inSlot: $1) }
    }

    /// The client sends `text`, as one read.
    func send(_ text: String) throws {
        try channel.writeInbound(ByteBuffer(string: text))
    }

    /// Runs what the loop has to do now (work the handler put off to after the current call stack).
    func runLoop() {
        loop.run()
    }

    /// The next complete response written, nil while there is none (its bytes stay for a later call).
    func readResponse(isHEAD: Bool = false) throws -> WrittenResponse? {
        collectOutput()
        var rest = output
        var parser = HTTPResponseParser(maximumHeadBytes: 64 << 10)
        parser.expectResponse(isHEAD: isHEAD)
        var head: HTTPResponseParser.Head?
        var body = ByteBuffer()
        while let part = try parser.next(from: &rest) {
            switch part {
            case .head(let parsed, _, _):
                head = parsed
            case .interim:
                break  // Kept in `raw`, ahead of the final head.
            case .body(var bytes):
                body.writeBuffer(&bytes)
            case .end:
                guard let head else { return nil }
                let raw = output.readString(length: output.readableBytes - rest.readableBytes) ?? ""
                return WrittenResponse(status: head.status, headers: head.headers, body: String(buffer: body), raw: raw)
            }
        }
        return nil
    }

    /// Every written byte not yet read as a response, as text.
    var unreadOutput: String {
        collectOutput()
        return String(buffer: output)
    }

    /// How many buffers the handler has written since the output was last read; they are kept for reading.
    func countWrites() -> Int {
        var writes = 0
        while let buffer = try? channel.readOutbound(as: ByteBuffer.self) {
            output.writeImmutableBuffer(buffer)
            writes += 1
        }
        return writes
    }

    private func collectOutput() {
        while let buffer = try? channel.readOutbound(as: ByteBuffer.self) {
            output.writeImmutableBuffer(buffer)
        }
    }

    /// Moves the loop's clock to `deadline`, running the tasks due by then, the handler's wake-ups among them.
    func advanceClock(to deadline: NIODeadline) {
        loop.advanceTime(to: deadline)
    }

    /// Moves the loop's clock on, a step at a time, until `condition` holds or `limit` of the loop's time has
    /// passed; returns whether it held. The handler's clock is the loop's: no wall-clock time passes.
    func advanceClock(until condition: () -> Bool, within limit: TimeAmount = .seconds(10)) -> Bool {
        let giveUp = loop.now + limit
        while !condition() {
            guard loop.now < giveUp else { return false }
            loop.advanceTime(by: .milliseconds(5))
        }
        return true
    }

    /// Closes the channel if it is open, and drops the loop's remaining tasks.
    func finish() {
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}
