import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHTTP1
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
            SharedResponseStream.Subscriber(sink: self, eventLoop: loop) { [self] error in failures.append(error) }
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
        let first = stream.receiveBodyPart(ByteBuffer(string: "a"))
        loop.run()
        try first.wait()
        _ = stream.receiveBodyPart(ByteBuffer(string: "b"))
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
        _ = stream.receiveBodyPart(ByteBuffer(string: "b"))
        stream.receiveEnd()
        loop.run()
        #expect(staying.events == ["head 200", "part a", "part b", "end"])
        #expect(leaving.events == ["head 200", "part a"])

        staying.taking = .fails
        let alone = SharedResponseStream(eventLoop: loop)
        #expect(alone.subscribe(staying.subscriber()))
        alone.receiveHead(status: .ok, headers: [:])
        let last = alone.receiveBodyPart(ByteBuffer(string: "c"))
        loop.run()
        #expect(throws: SharedResponseStream.NoSubscriberLeft.self) { try last.wait() }
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
        let first = streams.joinOrLead(key, RecordingSink(loop: loop).subscriber(), on: loop)
        #expect(first != nil)
        #expect(streams.joinOrLead(key, RecordingSink(loop: loop).subscriber(), on: loop) == nil)
        #expect(streams.joinOrLead(other, RecordingSink(loop: loop).subscriber(), on: loop) != nil)
        #expect(streams.load == (2, 3))
        first?.receiveHead(status: .ok, headers: [:])
        let second = streams.joinOrLead(key, RecordingSink(loop: loop).subscriber(), on: loop)
        #expect(second != nil && second !== first)
        // The first's end does not forget the second, which replaced it.
        if let first { streams.ended(key, first) }
        #expect(streams.load.streams == 2)
        if let second { streams.ended(key, second) }
        #expect(streams.load.streams == 1)
        loop.run()
    }
}
