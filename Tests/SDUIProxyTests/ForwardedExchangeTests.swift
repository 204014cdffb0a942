import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOSSL
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A forwarded exchange on one upstream connection, driven through an `EmbeddedChannel`: the request body as it
/// is written, the response as it is passed on, reading paused while the client holds a part, and the
/// connection closed under a request the client gave up.
@Suite("A forwarded exchange on a loop-local connection")
struct ForwardedExchangeTests {
    typealias Fixture = UpstreamConnectionFixture
    typealias Outcome = UpstreamConnectionFixture.Outcome

    @Test("a body without a length goes out in chunks as the client sends it; the connection is kept after the answer")
    func chunkedBody() throws {
        let fixture = try Fixture()
        let body = RequestBodyStream(eventLoop: fixture.loop, contentLength: nil)
        let outcome = fixture.forward(body: body)
        #expect(try fixture.written() == "POST /form HTTP/1.1\r\nHost: x\r\n\r\n", "the head goes out before any body")
        _ = body.append(ByteBuffer(string: "abc"))
        fixture.loop.run()
        #expect(try fixture.written() == "3\r\nabc\r\n")
        _ = body.append(ByteBuffer(string: "de"))
        body.finish()
        fixture.loop.run()
        #expect(try fixture.written() == "2\r\nde\r\n0\r\n\r\n")

        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        #expect(fixture.sink.head == .ok)
        #expect(fixture.sink.parts == ["ok"])
        #expect(fixture.sink.ended)
        #expect(outcome.succeeded)
        #expect(fixture.handler.isUsable, "a whole exchange leaves the connection for the next")
        #expect(outcome.exchange == nil, "nothing keeps the exchange once it ended, though its body is still there")
        withExtendedLifetime(body) {}
    }

    @Test("reading waits while the client holds a part; the end is passed on once it took the last")
    func backPressure() throws {
        let fixture = try Fixture()
        fixture.sink.holds = true
        let outcome = fixture.forward(body: nil)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
        #expect(fixture.sink.parts == ["abc"])
        fixture.channel.read()
        #expect(fixture.reads.reads == 0, "the backend is not read while the client holds a part")
        fixture.sink.held[0].succeed()
        #expect(fixture.reads.reads == 1, "the read asked for meanwhile goes out once the part is taken")

        try fixture.receive("def")
        #expect(fixture.sink.parts == ["abc", "def"])
        #expect(!fixture.sink.ended, "the end waits for the client to take the last part")
        #expect(outcome.result == nil)
        #expect(fixture.handler.isUsable, "the connection is free already: its part of the exchange is over")
        fixture.sink.held[1].succeed()
        #expect(fixture.sink.ended)
        #expect(outcome.succeeded)
    }

    @Test("a client that cannot take a part gives the exchange up: the connection closes, with the client's error")
    func clientGone() throws {
        struct Gone: Error {}
        let fixture = try Fixture()
        fixture.sink.holds = true
        let outcome = fixture.forward(body: nil)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
        fixture.sink.held[0].fail(Gone())
        #expect(!fixture.channel.isActive, "the rest of the response is not read for no one")
        #expect(outcome.failure is Gone)
        #expect(!fixture.sink.ended)
    }

    @Test("a body the client gives up closes the connection under the request: the backend never sees it end")
    func bodyGivenUp() throws {
        let fixture = try Fixture()
        let body = RequestBodyStream(eventLoop: fixture.loop, contentLength: 10)
        let outcome = fixture.forward(body: body)
        _ = body.append(ByteBuffer(string: "hello"))
        fixture.loop.run()
        #expect(try fixture.written() == "POST /form HTTP/1.1\r\nHost: x\r\n\r\nhello")
        let tooLarge = ProxyError(.tooLarge, "the request body exceeds limits.maxBodyBytes")
        body.fail(tooLarge)
        fixture.loop.run()
        #expect(!fixture.channel.isActive)
        #expect(try fixture.written() == "")
        #expect((outcome.failure as? ProxyError) == tooLarge, "the client's error, not the connection's")
    }

    @Test("an answer that comes before the whole body is passed on, and its connection closed after it")
    func earlyAnswer() throws {
        let fixture = try Fixture()
        let body = RequestBodyStream(eventLoop: fixture.loop, contentLength: 10)
        let outcome = fixture.forward(body: body)
        _ = body.append(ByteBuffer(string: "hello"))
        fixture.loop.run()
        try fixture.receive("HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n")
        #expect(fixture.sink.head == .payloadTooLarge)
        #expect(fixture.sink.ended)
        #expect(outcome.succeeded)
        #expect(!fixture.channel.isActive, "the backend would read the rest of the body as the next request")
        #expect(outcome.exchange == nil, "the body's next part is no longer waited for")
        #expect(body.append(ByteBuffer(string: "world")), "what the client still sends is dropped, not held")
    }

    @Test("the backend's time starts once the client's body is whole, even when the backend stopped reading it")
    func headDeadlineAfterUpload() throws {
        let fixture = try Fixture()
        let body = RequestBodyStream(eventLoop: fixture.loop, contentLength: 5)
        let outcome = fixture.forward(body: body)
        fixture.loop.advanceTime(by: .seconds(60))
        #expect(outcome.result == nil, "the upload is the client's time, however long it takes")
        fixture.writes.holding = true
        _ = body.append(ByteBuffer(string: "hello"))
        body.finish()
        fixture.loop.advanceTime(by: .seconds(4))
        #expect(outcome.result == nil)
        fixture.loop.advanceTime(by: .seconds(2))
        #expect((outcome.failure as? ProxyError) == ProxyError(.timeout, "the backend did not answer in time"))
        #expect(!fixture.channel.isActive)
    }

    @Test("a client that takes no part for bodyIdleTimeout is cut off; the clock starts again as a part comes")
    func clientStalled() throws {
        let fixture = try Fixture()
        fixture.sink.holds = true
        let outcome = fixture.forward(body: nil)
        try fixture.receive("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
        fixture.loop.advanceTime(by: .seconds(20))
        fixture.sink.held[0].succeed()
        // A part 25 s after the client took the last: the client has its own 30 s for it from now.
        fixture.loop.advanceTime(by: .seconds(25))
        try fixture.receive("de")
        fixture.loop.advanceTime(by: .seconds(20))
        #expect(outcome.result == nil, "20 s after the part came, within the 30 s")
        fixture.loop.advanceTime(by: .seconds(11))
        #expect(
            (outcome.failure as? ProxyError) == ProxyError(.timeout, "the client did not take the response in time")
        )
        #expect(!fixture.channel.isActive, "the connection is not held for a client that does not read")
    }

    @Test("RFC 9112 §9.8: over TLS, a body that runs to a close without close_notify is not taken as whole")
    func truncatedByUncleanClose() throws {
        let fixture = try Fixture()
        let outcome = fixture.fetch()
        try fixture.receive("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n{\"_beagleComponent_\":")
        fixture.channel.pipeline.fireErrorCaught(NIOSSLError.uncleanShutdown)
        fixture.loop.run()
        #expect(!fixture.channel.isActive)
        guard case .failure(let error)? = outcome.result else {
            Issue.record("a cut-off body was taken: \(String(describing: outcome.result))")
            return
        }
        #expect((error as? ProxyError) == ProxyError(.network, "the backend closed the connection"))
    }

    @Test("a fill whose client was passed an interim response is not sent again when its connection closes")
    func noResendAfterInterim() throws {
        let fixture = try Fixture()
        let outcome = fixture.fetch(retryIfStale: true)
        try fixture.receive("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        try fixture.channel.close().wait()
        #expect(fixture.pool.ended.map(\.wouldResend) == [false])
        guard case .failure(let error)? = outcome.result else {
            Issue.record("the fill did not fail: \(String(describing: outcome.result))")
            return
        }
        #expect((error as? ProxyError) == ProxyError(.network, "the backend closed the connection"), "\(error)")
    }

    @Test("a body that runs to a clean close is whole")
    func wholeByCleanClose() throws {
        let fixture = try Fixture()
        let outcome = fixture.fetch()
        try fixture.receive("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\nwhole")
        try fixture.channel.close().wait()
        let response = try #require(try outcome.result?.get())
        #expect(String(buffer: response.body) == "whole")
    }

    @Test("an empty part of a body without a length is not written: it would end the body")
    func emptyChunk() throws {
        let fixture = try Fixture()
        let body = RequestBodyStream(eventLoop: fixture.loop, contentLength: nil)
        _ = fixture.forward(body: body)
        _ = try fixture.written()
        _ = body.append(ByteBuffer())
        _ = body.append(ByteBuffer(string: "a"))
        body.finish()
        fixture.loop.run()
        #expect(try fixture.written() == "1\r\na\r\n0\r\n\r\n")
    }

    @Test("interim responses go to the sink as they come, the final head after them")
    func interim() throws {
        let fixture = try Fixture()
        let outcome = fixture.forward(body: nil)
        try fixture.receive("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        #expect(fixture.sink.interim.map(\.code) == [103])
        #expect(fixture.sink.head == nil)
        try fixture.receive("HTTP/1.1 204 No Content\r\n\r\n")
        #expect(fixture.sink.head == .noContent)
        #expect(outcome.succeeded)
    }
}
