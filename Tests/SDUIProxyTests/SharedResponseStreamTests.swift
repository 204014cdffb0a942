import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// One backend answer fanned out to the clients that asked for it before its head came, driven directly on an
/// embedded loop.
@Suite struct SharedResponseStreamTests {
    /// A client's relay that records what it got, and takes body parts at once, later, or never (gone).
    final class RecordingSink: ForwardedResponseSink, @unchecked Sendable {
        enum Taking { case atOnce, whenReleased, fails }

        let loop: EmbeddedEventLoop
        var taking: Taking
        var events: [String] = []
        var failures: [ProxyError] = []
        var wentAlone = false
        private var held: [EventLoopPromise<Void>] = []

        init(loop: EmbeddedEventLoop, taking: Taking = .atOnce) {
            self.loop = loop
            self.taking = taking
        }

        func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) { events.append("head \(status.code)") }

        func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            events.append("part \(String(buffer: buffer))")
            switch taking {
            case .atOnce: return loop.makeSucceededVoidFuture()
            case .fails: return loop.makeFailedFuture(ChannelError.ioOnClosedChannel)
            case .whenReleased:
                let promise = loop.makePromise(of: Void.self)
                held.append(promise)
                return promise.futureResult
            }
        }

        func receiveEnd() { events.append("end") }

        func release() {
            for promise in held { promise.succeed() }
            held = []
        }

        func subscriber() -> SharedResponseStream.Subscriber {
            SharedResponseStream.Subscriber(
                sink: self,
                eventLoop: loop,
                failed: { [self] error in failures.append(error) },
                goAlone: { [self] in wentAlone = true }
            )
        }
    }

    private let loop = EmbeddedEventLoop()

    @Test("every subscriber gets the head, the parts and the end in order; none may join after the head")
    func fansOutInOrder() throws {
        let stream = SharedResponseStream(eventLoop: loop)
        let sinks = (0..<3).map { _ in RecordingSink(loop: loop) }
        for sink in sinks { #expect(stream.subscribe(sink.subscriber())) }
        stream.receiveHead(status: .ok, headers: [:])
        let late = RecordingSink(loop: loop)
        #expect(!stream.subscribe(late.subscriber()))
        for part in ["a", "b"] {
            let taken = stream.receiveBodyPart(ByteBuffer(string: part))
            loop.run()
            try taken.wait()
        }
        stream.receiveEnd()
        loop.run()
        for sink in sinks { #expect(sink.events == ["head 200", "part a", "part b", "end"]) }
        #expect(late.events.isEmpty)
        #expect(stream.subscriberCount == 0)
    }

    @Test("a body part is let go only once the slowest subscriber took it")
    func theSlowestPaces() throws {
        let stream = SharedResponseStream(eventLoop: loop)
        let fast = RecordingSink(loop: loop)
        let slow = RecordingSink(loop: loop, taking: .whenReleased)
        #expect(stream.subscribe(fast.subscriber()))
        #expect(stream.subscribe(slow.subscriber()))
        stream.receiveHead(status: .ok, headers: [:])
        let taken = NIOLockedValueBox(false)
        stream.receiveBodyPart(ByteBuffer(string: "a")).whenSuccess { taken.withLockedValue { $0 = true } }
        loop.run()
        #expect(!taken.withLockedValue { $0 })
        #expect(fast.events == ["head 200", "part a"])
        slow.release()
        loop.run()
        #expect(taken.withLockedValue { $0 })
    }

    @Test("a subscriber that cannot take a part is dropped and the others go on; with none left the exchange stops")
    func goneSubscribersAreDropped() throws {
        let stream = SharedResponseStream(eventLoop: loop)
        let staying = RecordingSink(loop: loop)
        let leaving = RecordingSink(loop: loop, taking: .fails)
        #expect(stream.subscribe(staying.subscriber()))
        #expect(stream.subscribe(leaving.subscriber()))
        stream.receiveHead(status: .ok, headers: [:])
        let first = stream.receiveBodyPart(ByteBuffer(string: "a"))
        loop.run()
        try first.wait()
        #expect(stream.subscriberCount == 1)
        #expect(leaving.failures.map(\.kind) == [.network])
        let second = stream.receiveBodyPart(ByteBuffer(string: "b"))
        loop.run()
        try second.wait()
        stream.receiveEnd()
        loop.run()
        #expect(staying.events == ["head 200", "part a", "part b", "end"])
        #expect(staying.failures.isEmpty)
        // Dropped, and its response cut short: no more parts, and no end.
        #expect(leaving.events == ["head 200", "part a"])

        staying.taking = .fails
        let alone = SharedResponseStream(eventLoop: loop)
        #expect(alone.subscribe(staying.subscriber()))
        alone.receiveHead(status: .ok, headers: [:])
        let last = alone.receiveBodyPart(ByteBuffer(string: "c"))
        loop.run()
        #expect(throws: SharedResponseStream.NoSubscriberLeft.self) { try last.wait() }
    }

    @Test("a subscriber that has not taken a part within the stall limit is dropped; the others are not held")
    func stalledSubscribersAreDropped() throws {
        let stream = SharedResponseStream(eventLoop: loop, stallLimit: .seconds(10))
        let reading = RecordingSink(loop: loop)
        let stopped = RecordingSink(loop: loop, taking: .whenReleased)
        #expect(stream.subscribe(reading.subscriber()))
        #expect(stream.subscribe(stopped.subscriber()))
        stream.receiveHead(status: .ok, headers: [:])
        let taken = NIOLockedValueBox(false)
        stream.receiveBodyPart(ByteBuffer(string: "a")).whenSuccess { taken.withLockedValue { $0 = true } }
        loop.advanceTime(by: .seconds(9))
        #expect(!taken.withLockedValue { $0 })
        loop.advanceTime(by: .seconds(1))
        #expect(taken.withLockedValue { $0 })
        #expect(stopped.failures.map(\.kind) == [.timeout])
        #expect(stream.subscriberCount == 1)
        // Its late taking changes nothing.
        stopped.release()
        loop.run()
        #expect(stream.subscriberCount == 1)
    }

    @Test("an answer meant for the first client alone goes to it; the others ask the backend themselves")
    func unshareableAnswers() {
        for headers: HTTPHeaders in [["Set-Cookie": "session=1"], ["Cache-Control": "private"], ["Vary": "*"]] {
            let stream = SharedResponseStream(eventLoop: loop)
            let sinks = (0..<3).map { _ in RecordingSink(loop: loop) }
            for sink in sinks { #expect(stream.subscribe(sink.subscriber())) }
            stream.receiveHead(status: .ok, headers: headers)
            loop.run()
            #expect(sinks.map(\.events) == [["head 200"], [], []], "\(headers)")
            #expect(sinks.map(\.wentAlone) == [false, true, true], "\(headers)")
            #expect(stream.subscriberCount == 1)
        }
        let forbidden = SharedResponseStream(eventLoop: loop)
        let sinks = (0..<2).map { _ in RecordingSink(loop: loop) }
        for sink in sinks { #expect(forbidden.subscribe(sink.subscriber())) }
        forbidden.receiveHead(status: .forbidden, headers: [:])
        loop.run()
        #expect(sinks.map(\.wentAlone) == [false, true])
    }

    @Test("subscribers on other loops than the exchange's get the whole answer, each on its own loop")
    func acrossLoops() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        defer { try? group.syncShutdownGracefully() }
        let loops = (0..<3).map { _ in group.next() }
        let stream = SharedResponseStream(eventLoop: loops[0])
        let received = (0..<2).map { _ in NIOLockedValueBox<[String]>([]) }
        for (index, loop) in loops.dropFirst().enumerated() {
            let log = received[index]
            let sink = LoopCheckingSink(loop: loop, log: log)
            let subscriber = SharedResponseStream.Subscriber(
                sink: sink,
                eventLoop: loop,
                failed: { _ in log.withLockedValue { $0.append("failed") } },
                goAlone: {}
            )
            #expect(stream.subscribe(subscriber))
        }
        try loops[0].submit {
            stream.receiveHead(status: .ok, headers: [:])
        }.wait()
        for part in ["a", "b", "c"] {
            try loops[0].flatSubmit { stream.receiveBodyPart(ByteBuffer(string: part)) }.wait()
        }
        try loops[0].submit { stream.receiveEnd() }.wait()
        for loop in loops { try loop.submit {}.wait() }
        for log in received {
            #expect(log.withLockedValue { $0 } == ["head", "part a", "part b", "part c", "end"])
        }
    }

    /// Records what it got, and fails the test when called off its loop.
    final class LoopCheckingSink: ForwardedResponseSink {
        let loop: any EventLoop
        let log: NIOLockedValueBox<[String]>

        init(loop: any EventLoop, log: NIOLockedValueBox<[String]>) {
            self.loop = loop
            self.log = log
        }

        func receiveHead(status: HTTPResponseStatus, headers: HTTPHeaders) {
            record("head")
        }

        func receiveBodyPart(_ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            record("part \(String(buffer: buffer))")
            // Taken a moment later, as a socket write is.
            return loop.scheduleTask(in: .milliseconds(1)) {}.futureResult
        }

        func receiveEnd() { record("end") }

        private func record(_ event: String) {
            log.withLockedValue { $0.append(loop.inEventLoop ? event : "off its loop: \(event)") }
        }
    }

    @Test("a failed exchange is told to every subscriber, once")
    func failureReachesEverySubscriber() {
        let stream = SharedResponseStream(eventLoop: loop)
        let sinks = (0..<2).map { _ in RecordingSink(loop: loop) }
        for sink in sinks { #expect(stream.subscribe(sink.subscriber())) }
        stream.fail(ProxyError(.timeout, "the backend did not answer"))
        stream.fail(ProxyError(.network, "again"))
        loop.run()
        for sink in sinks { #expect(sink.failures.map(\.kind) == [.timeout]) }
        #expect(!stream.subscribe(RecordingSink(loop: loop).subscriber()))
    }

    @Test("the registry: the first request leads, the next join until the head, then a new stream leads")
    func registry() {
        let streams = SharedResponseStreams()
        let key = CacheKey(target: "/big", platform: "WEB")
        let other = CacheKey(target: "/big", platform: "IOS")
        let request = "host:a\n"
        let first = streams.joinOrLead(key, request: request, RecordingSink(loop: loop).subscriber(), on: loop)
        #expect(first != nil)
        #expect(streams.joinOrLead(key, request: request, RecordingSink(loop: loop).subscriber(), on: loop) == nil)
        #expect(streams.joinOrLead(other, request: request, RecordingSink(loop: loop).subscriber(), on: loop) != nil)
        // The same key asked differently (another cookie, say) does not share.
        #expect(
            streams.joinOrLead(key, request: "host:a\ncookie:b\n", RecordingSink(loop: loop).subscriber(), on: loop)
                != nil
        )
        #expect(streams.load == (3, 4))
        first?.receiveHead(status: .ok, headers: [:])
        let second = streams.joinOrLead(key, request: request, RecordingSink(loop: loop).subscriber(), on: loop)
        #expect(second != nil && second !== first)
        // The first's end does not forget the second, which replaced it.
        if let first { streams.ended(key, request: request, first) }
        #expect(streams.load.streams == 3)
        if let second { streams.ended(key, request: request, second) }
        #expect(streams.load.streams == 2)
        loop.run()
    }
}
