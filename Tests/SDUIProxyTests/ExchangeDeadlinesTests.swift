import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import SDUIProxy

/// The head's deadline and the body's idle limit of an AsyncHTTPClient exchange, on a loop whose time the test
/// moves.
@Suite struct ExchangeDeadlinesTests {
    /// A fresh set of deadlines (head 5 s, body idle 2 s) on `loop`, and whether they cancelled the exchange.
    private static func watched(
        on loop: EmbeddedEventLoop,
        ended: EventLoopPromise<Void>
    ) -> (ExchangeDeadlines, NIOLockedValueBox<Bool>) {
        let deadlines = ExchangeDeadlines(headTimeout: .seconds(5), bodyIdleTimeout: .seconds(2), eventLoop: loop)
        let cancelled = NIOLockedValueBox(false)
        deadlines.watch(ended: ended.futureResult) { cancelled.withLockedValue { $0 = true } }
        return (deadlines, cancelled)
    }

    @Test("no head within upstream.timeout cancels the exchange as the head's expiry")
    func headDeadline() {
        let loop = EmbeddedEventLoop()
        let ended = loop.makePromise(of: Void.self)
        let (deadlines, cancelled) = Self.watched(on: loop, ended: ended)
        deadlines.start()
        loop.advanceTime(by: .milliseconds(4900))
        #expect(deadlines.expiry == nil)
        loop.advanceTime(by: .milliseconds(200))
        #expect(deadlines.expiry == .head)
        #expect(cancelled.withLockedValue { $0 })
        ended.succeed()
    }

    @Test("after the head, a body that keeps coming lives on; a silence of bodyIdleTimeout ends it")
    func bodyIdle() {
        let loop = EmbeddedEventLoop()
        let ended = loop.makePromise(of: Void.self)
        let (deadlines, cancelled) = Self.watched(on: loop, ended: ended)
        deadlines.start()
        loop.advanceTime(by: .seconds(1))
        deadlines.headArrived()
        for _ in 0..<10 {
            loop.advanceTime(by: .milliseconds(1500))
            deadlines.bodyPartArrived()
        }
        #expect(deadlines.expiry == nil, "15 s in all, never 2 s of silence, and the head's deadline is over")
        loop.advanceTime(by: .milliseconds(2100))
        #expect(deadlines.expiry == .body)
        #expect(cancelled.withLockedValue { $0 })
        ended.succeed()
    }

    @Test("while a part waits for a slow client the backend is not read, and its silence is not counted")
    func slowClient() {
        let loop = EmbeddedEventLoop()
        let ended = loop.makePromise(of: Void.self)
        let (deadlines, cancelled) = Self.watched(on: loop, ended: ended)
        deadlines.start()
        deadlines.headArrived()
        let taken = loop.makePromise(of: Void.self)
        deadlines.bodyPartArrived(untilTaken: taken.futureResult)
        loop.advanceTime(by: .seconds(10))
        #expect(deadlines.expiry == nil)
        taken.succeed()
        loop.advanceTime(by: .milliseconds(1900))
        #expect(deadlines.expiry == nil, "the silence starts when the client took the part")
        loop.advanceTime(by: .milliseconds(2200))
        #expect(deadlines.expiry == .body)
        #expect(cancelled.withLockedValue { $0 })
        ended.succeed()
    }

    @Test("an exchange that ended is never cancelled")
    func ended() {
        let loop = EmbeddedEventLoop()
        let ended = loop.makePromise(of: Void.self)
        let (deadlines, cancelled) = Self.watched(on: loop, ended: ended)
        deadlines.start()
        ended.succeed()
        loop.advanceTime(by: .seconds(60))
        #expect(deadlines.expiry == nil)
        #expect(!cancelled.withLockedValue { $0 })
    }
}
