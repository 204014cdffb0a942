import NIOCore
import NIOEmbedded
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A cache fill on one upstream connection, driven through an `EmbeddedChannel`: the response's framing however
/// the backend's bytes are split, a backend that closes mid-body, interim responses before the head, a reused
/// connection found stale as the request goes out, and the limits of size and time.
@Suite("A cache fill on a loop-local connection")
struct UpstreamConnectionHandlerTests {
    typealias Fixture = UpstreamConnectionFixture

    private func failure(of outcome: Fixture.FillOutcome) -> ProxyError? {
        guard case .failure(let error)? = outcome.result else { return nil }
        return error as? ProxyError
    }

    @Test("a response split anywhere is read whole, and the connection then carries the next exchange")
    func framingAcrossReads() throws {
        let fixture = try Fixture()
        let first = fixture.fetch()
        #expect(try fixture.written() == "GET /screen HTTP/1.1\r\nHost: x\r\n\r\n")
        for piece in ["HTTP/1.1 200 OK\r\nContent-Le", "ngth: 5\r", "\n\r\nhe", "llo"] {
            #expect(first.result == nil)
            try fixture.receive(piece)
        }
        #expect(String(buffer: try #require(try first.result?.get()).body) == "hello")
        #expect(fixture.handler.isUsable)

        let second = fixture.fetch()
        #expect(try fixture.written() == "GET /screen HTTP/1.1\r\nHost: x\r\n\r\n")
        try fixture.receive("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        #expect(String(buffer: try #require(try second.result?.get()).body) == "ok")
        #expect(fixture.handler.isUsable)
    }

    @Test("a backend that closes mid-body fails the fill, which is not sent again even on a reused connection")
    func closedMidBody() throws {
        let fixture = try Fixture()
        let outcome = fixture.fetch(retryIfStale: true)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd")
        try fixture.channel.close().wait()
        #expect(failure(of: outcome) == ProxyError(.network, "the backend closed the connection"))
        #expect(fixture.pool.ended.map(\.wouldResend) == [false])
        // The pool counts the connection out before the exchange ends, so a retry finds the room it left.
        #expect(fixture.pool.told == ["closed", "ended"])
        #expect(!fixture.handler.isUsable)
    }

    @Test("interim responses before the head are let go, and the final response is the fill's")
    func interimBeforeHead() throws {
        let fixture = try Fixture()
        let outcome = fixture.fetch()
        try fixture.receive("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
        #expect(outcome.result == nil)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        let response = try #require(try outcome.result?.get())
        #expect(response.status == .ok)
        #expect(String(buffer: response.body) == "ok")
    }

    @Test("a reused connection reset before any byte of the answer sends the fill again; a new one does not")
    func staleOnFirstWrite() throws {
        let reused = try Fixture()
        _ = reused.fetch(retryIfStale: true)
        reused.channel.pipeline.fireErrorCaught(IOError(errnoCode: ECONNRESET, reason: "read"))
        reused.loop.run()
        #expect(reused.pool.ended.map(\.wouldResend) == [true])

        let new = try Fixture()
        let reset = new.fetch(retryIfStale: false)
        new.channel.pipeline.fireErrorCaught(IOError(errnoCode: ECONNRESET, reason: "read"))
        new.loop.run()
        #expect(new.pool.ended.map(\.wouldResend) == [false])
        let resetFailure = try #require(failure(of: reset))
        #expect(resetFailure.message.contains("connection reset"), "\(resetFailure)")
        #expect(!new.channel.isActive)
    }

    @Test("a reused connection answered in part before the reset does not send the fill again")
    func noResendAfterBytes() throws {
        let fixture = try Fixture()
        _ = fixture.fetch(retryIfStale: true)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Le")
        fixture.channel.pipeline.fireErrorCaught(IOError(errnoCode: ECONNRESET, reason: "read"))
        fixture.loop.run()
        #expect(fixture.pool.ended.map(\.wouldResend) == [false])
    }

    @Test("a declared length past the fill's limit fails it at the head and closes the connection")
    func tooLargeAtTheHead() throws {
        let fixture = try Fixture()
        let outcome = fixture.fetch(maxBodyBytes: 4)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        #expect(failure(of: outcome)?.kind == .upstreamTooLarge)
        fixture.loop.run()
        #expect(!fixture.channel.isActive)
    }

    @Test("a fill's body is held against the fills' budget while it is read, and given back when it ends")
    func budget() throws {
        let budget = ByteBudget(limit: 10)
        let fixture = try Fixture()
        let declared = fixture.fetch(budget: budget)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
        #expect(budget.inUse == 6, "a declared length is held whole at the head")
        try fixture.receive("def")
        #expect(String(buffer: try #require(try declared.result?.get()).body) == "abcdef")
        #expect(budget.inUse == 0)

        let growing = fixture.fetch(budget: budget)
        try fixture.receive("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n")
        #expect(budget.inUse == 4, "without a length, each part as it comes")
        try fixture.receive("8\r\n12345678\r\n")
        #expect(failure(of: growing)?.kind == .fillBudgetFull)
        #expect(budget.inUse == 0)
        fixture.loop.run()
        #expect(!fixture.channel.isActive)
    }

    @Test("no head by the deadline times the fill out; a body that stops for bodyIdleTimeout stalls it")
    func deadlines() throws {
        let waiting = try Fixture()
        let timedOut = waiting.fetch()
        waiting.loop.advanceTime(by: .seconds(4))
        #expect(timedOut.result == nil)
        waiting.loop.advanceTime(by: .seconds(1))
        #expect(failure(of: timedOut) == ProxyError(.timeout, "the backend did not answer in time"))
        #expect(!waiting.channel.isActive)

        let stalling = try Fixture()
        let stalled = stalling.fetch()
        try stalling.receive("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
        // Past the head's deadline: the body's idle limit (30 s from its last part) is what counts now.
        stalling.loop.advanceTime(by: .seconds(20))
        try stalling.receive("cd")
        stalling.loop.advanceTime(by: .seconds(29))
        #expect(stalled.result == nil)
        stalling.loop.advanceTime(by: .seconds(1))
        #expect(failure(of: stalled) == ProxyError(.timeout, "the backend stopped sending its response"))
    }

    @Test("an exchange on a reused connection has its own whole deadline, not what was left of the one before")
    func deadlineOnReusedConnection() throws {
        let fixture = try Fixture()
        let first = fixture.fetch()
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        #expect(String(buffer: try #require(try first.result?.get()).body) == "ok")

        // The second exchange starts 3.5 s in: its deadline is 5 s from then, at 8.5 s.
        fixture.loop.advanceTime(by: .milliseconds(3500))
        let second = fixture.fetch()
        fixture.loop.advanceTime(by: .seconds(2))
        #expect(second.result == nil, "the first exchange's deadline, at 5 s, is not the second's")
        #expect(fixture.channel.isActive)
        fixture.loop.advanceTime(by: .milliseconds(2999))
        #expect(second.result == nil)
        fixture.loop.advanceTime(by: .milliseconds(1))
        #expect(failure(of: second) == ProxyError(.timeout, "the backend did not answer in time"))
        #expect(!fixture.channel.isActive)
    }

    @Test("a connection does not keep its pool alive; when the pool is gone, the exchange's caller still hears")
    func poolGone() throws {
        let loop = EmbeddedEventLoop()
        var pool: Fixture.RecordingPool? = Fixture.RecordingPool()
        weak let released = pool
        let handler = UpstreamConnectionHandler(eventLoop: loop, pool: pool!, id: .init(0))
        pool = nil
        #expect(released == nil)
        let channel = EmbeddedChannel(handler: handler, loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let outcome = Fixture.FillOutcome()
        let exchange = LoopLocalHTTPClient.Exchange(
            request: ByteBuffer(string: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            isHEAD: false,
            mayResend: false,
            maxBodyBytes: 100,
            budget: nil,
            deadline: loop.now + .seconds(5),
            bodyIdleTimeout: .seconds(30),
            interim: nil
        )
        handler.send(exchange, retryIfStale: false) { outcome.result = $0 }
        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
        #expect(String(buffer: try #require(try outcome.result?.get()).body) == "ok")
        _ = try channel.finish()
    }
}
