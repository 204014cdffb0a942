import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("The client connection's state machine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine

    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
    static let timeouts = Machine.Timeouts(idle: .seconds(60), request: .seconds(10))

    static func head(_ uri: String = "/a", keepAlive: Bool = true, method: HTTPMethod = .GET) -> HTTPServerRequestPart {
        var headers: HTTPHeaders = ["Host": "x"]
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        return .head(HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: headers))
    }

    static func isHead(_ action: Machine.PartAction, _ uri: String) -> Bool {
        if case .handleHead(let head) = action { return head.uri == uri }
        return false
    }

    /// A machine that has handled a whole GET for `uri` and waits to answer it.
    static func responding(to uri: String = "/a", keepAlive: Bool = true) -> Machine {
        var machine = Machine(timeouts: timeouts, now: start)
        machine.bytesReceived(now: start)
        #expect(isHead(machine.partReceived(head(uri, keepAlive: keepAlive), now: start), uri))
        #expect(machine.partReceived(.end(nil), now: start) == .handleEnd)
        return machine
    }

    // MARK: One request

    @Test("a new connection waits under the idle deadline, and closes when it passes")
    func idleDeadline() {
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        #expect(machine.deadline == .init(kind: .idle, at: Self.start + .seconds(60)))
        #expect(machine.isIdle)
        #expect(machine.timerFired(now: Self.start + .seconds(59)) == .none)
        #expect(machine.timerFired(now: Self.start + .seconds(60)) == .closeIdle)
        #expect(machine.ignoresInput)
        #expect(machine.partReceived(Self.head(), now: Self.start) == .stopReading)
    }

    @Test("the request deadline runs from the first byte, and a head that stops half-way gets a 408 with no request")
    func requestDeadlineFromFirstByte() {
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        let firstByte = Self.start + .seconds(5)
        #expect(
            machine.bytesArrived(atRequestStart: true, now: firstByte) == .handleWithDeadline(firstByte + .seconds(10))
        )
        #expect(machine.deadline == .init(kind: .request, at: firstByte + .seconds(10)))
        #expect(!machine.isIdle)
        // More bytes of the same head do not move it.
        #expect(machine.bytesArrived(atRequestStart: false, now: firstByte + .seconds(3)) == .handle)
        #expect(machine.deadline?.at == firstByte + .seconds(10))
        #expect(machine.timerFired(now: firstByte + .seconds(10)) == .requestTimedOut(headArrived: false))
        #expect(machine.bytesArrived(atRequestStart: false, now: firstByte) == .ignore, "nothing more is read")
        // The 408 is the connection's last response.
        #expect(machine.responseStarted() == true)
        #expect(machine.responseEnded(now: firstByte + .seconds(10)) == .close)
    }

    @Test("a head that arrives keeps the deadline its first byte set; a body that stalls gets a 408 for its request")
    func requestDeadlineCoversTheBody() {
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        machine.bytesReceived(now: Self.start)
        #expect(Self.isHead(machine.partReceived(Self.head(method: .POST), now: Self.start + .seconds(4)), "/a"))
        #expect(machine.deadline == .init(kind: .request, at: Self.start + .seconds(10)))
        #expect(
            machine.partReceived(.body(ByteBuffer(string: "x")), now: Self.start)
                == .handleBody(ByteBuffer(string: "x"))
        )
        #expect(machine.timerFired(now: Self.start + .seconds(10)) == .requestTimedOut(headArrived: true))
        #expect(machine.ignoresInput)
        #expect(machine.partReceived(.body(ByteBuffer(string: "y")), now: Self.start) == .stopReading)
    }

    @Test("the request deadline ends with the request: waiting for the backend is not the client's time")
    func noDeadlineWhileResponding() {
        var machine = Self.responding()
        #expect(machine.deadline == nil)
        #expect(machine.timerFired(now: Self.start + .seconds(3600)) == .none)
        #expect(machine.responseStarted() == false)
        let end = Self.start + .seconds(20)
        #expect(machine.responseEnded(now: end) == .waitForRequest)
        #expect(machine.deadline == .init(kind: .idle, at: end + .seconds(60)))
        #expect(machine.isIdle)
    }

    @Test("Connection: close on the request makes its response the last")
    func clientAsksToClose() {
        var machine = Self.responding(keepAlive: false)
        #expect(machine.responseStarted() == true)
        #expect(machine.responseEnded(now: Self.start) == .close)
        #expect(machine.ignoresInput)
        #expect(machine.deadline == nil)
    }

    @Test("the parser's word on keep-alive is taken for the head it goes with; a held-back head's is read from it")
    func keepAliveFromTheParser() {
        // Told the head closes, though its fields say nothing: the parser read them.
        var told = Machine(timeouts: Self.timeouts, now: Self.start)
        told.bytesReceived(now: Self.start)
        #expect(
            Self.isHead(told.partReceived(Self.head("/a"), keepsConnectionOpen: false, now: Self.start), "/a")
        )
        #expect(told.partReceived(.end(nil), now: Self.start) == .handleEnd)
        #expect(told.responseStarted() == true)
        #expect(told.responseEnded(now: Self.start) == .close)
        // A head held back behind a response is read from its own fields when its turn comes, whatever was said
        // of it when it arrived (the parser had moved on).
        var held = Self.responding(to: "/first")
        #expect(
            held.partReceived(Self.head("/second", keepAlive: false), keepsConnectionOpen: true, now: Self.start)
                == .holdBack
        )
        #expect(held.partReceived(.end(nil), now: Self.start) == .holdBack)
        #expect(held.responseStarted() == false)
        #expect(held.responseEnded(now: Self.start) != .close)
        #expect(Self.isHead(held.nextHeldBackPart(now: Self.start) ?? .drop, "/second"))
        #expect(held.nextHeldBackPart(now: Self.start) == .handleEnd)
        #expect(held.responseStarted() == true, "the held-back head said Connection: close")
    }

    // MARK: Pipelining

    @Test("a request pipelined behind one being answered is held back, reading pauses, and it follows the answer")
    func pipelinedRequestWaits() {
        var machine = Self.responding(to: "/first")
        #expect(machine.partReceived(Self.head("/second"), now: Self.start) == .holdBack)
        #expect(machine.partReceived(.end(nil), now: Self.start) == .holdBack)
        #expect(machine.hasHeldBackParts)
        #expect(machine.readRequested() == false, "reading pauses while requests wait")
        #expect(machine.nextHeldBackPart(now: Self.start) == nil, "nothing is handed over before the answer ends")

        #expect(machine.responseStarted() == false)
        #expect(machine.responseEnded(now: Self.start) == .handleHeldBack)
        #expect(Self.isHead(machine.nextHeldBackPart(now: Self.start)!, "/second"))
        #expect(machine.nextHeldBackPart(now: Self.start) == .handleEnd)
        #expect(machine.nextHeldBackPart(now: Self.start) == nil)
        #expect(!machine.hasHeldBackParts)
        #expect(
            machine.heldBackPartsHandled(requestStarted: false, now: Self.start) == true,
            "the paused read happens now"
        )
        #expect(machine.readRequested() == true)
    }

    @Test("held-back parts of two requests are handed over one request at a time")
    func twoPipelinedRequests() {
        var machine = Self.responding(to: "/1")
        for part in [Self.head("/2"), .end(nil), Self.head("/3"), .end(nil)] {
            #expect(machine.partReceived(part, now: Self.start) == .holdBack)
        }
        _ = machine.responseStarted()
        #expect(machine.responseEnded(now: Self.start) == .handleHeldBack)
        #expect(Self.isHead(machine.nextHeldBackPart(now: Self.start)!, "/2"))
        #expect(machine.nextHeldBackPart(now: Self.start) == .handleEnd)
        #expect(machine.nextHeldBackPart(now: Self.start) == nil, "/3 waits for /2's answer")
        #expect(machine.hasHeldBackParts)
        _ = machine.responseStarted()
        #expect(machine.responseEnded(now: Self.start) == .handleHeldBack)
        #expect(Self.isHead(machine.nextHeldBackPart(now: Self.start)!, "/3"))
    }

    @Test("a request pipelined behind a response that closes the connection is never handled")
    func nothingAfterTheLastResponse() {
        var machine = Self.responding(to: "/1", keepAlive: false)
        #expect(machine.partReceived(Self.head("/2"), now: Self.start) == .stopReading)
        #expect(machine.ignoresInput)
        #expect(machine.responseStarted() == true)
        #expect(machine.responseEnded(now: Self.start) == .close)
        #expect(machine.nextHeldBackPart(now: Self.start) == nil)
    }

    @Test("held-back bytes of a further request start its deadline when they are handed over")
    func heldBackPartialRequestIsTimed() {
        var machine = Self.responding(to: "/1")
        #expect(machine.partReceived(Self.head("/2"), now: Self.start) == .holdBack)
        #expect(machine.partReceived(.end(nil), now: Self.start) == .holdBack)
        _ = machine.responseStarted()
        _ = machine.responseEnded(now: Self.start)
        let later = Self.start + .seconds(1)
        _ = machine.nextHeldBackPart(now: later)
        #expect(machine.deadline == .init(kind: .request, at: later + .seconds(10)))
        _ = machine.nextHeldBackPart(now: later)
        _ = machine.responseStarted()
        _ = machine.responseEnded(now: later)
        #expect(machine.deadline?.kind == .idle)
        _ = machine.heldBackPartsHandled(requestStarted: true, now: later)
        #expect(machine.deadline == .init(kind: .request, at: later + .seconds(10)))
    }

    // MARK: Early answers and back-pressure

    @Test("an answer that ends before the request body: the rest is read and dropped, then the next request")
    func earlyAnswer() {
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        _ = machine.partReceived(Self.head(method: .POST), now: Self.start)
        _ = machine.responseStarted()
        #expect(machine.responseEnded(now: Self.start) == .dropRestOfBody(readNow: false))
        #expect(machine.isReadingRequest)
        #expect(machine.partReceived(.body(ByteBuffer(string: "rest")), now: Self.start) == .drop)
        #expect(machine.partReceived(.end(nil), now: Self.start) == .drop)
        #expect(machine.deadline?.kind == .idle)
        #expect(Self.isHead(machine.partReceived(Self.head("/next"), now: Self.start), "/next"))
    }

    @Test("a body that stalls after its answer has ended closes the connection without another answer")
    func stalledBodyAfterEarlyAnswer() {
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        _ = machine.partReceived(Self.head(method: .POST), now: Self.start)
        _ = machine.responseStarted()
        _ = machine.responseEnded(now: Self.start)
        #expect(machine.timerFired(now: Self.start + .seconds(10)) == .close)
    }

    @Test("reading pauses while the body's taker is full, and resumes with the read that was asked for")
    func bodyBackPressure() {
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        _ = machine.partReceived(Self.head(method: .POST), now: Self.start)
        #expect(machine.readRequested() == true)
        machine.bodyTakerFull()
        #expect(machine.readRequested() == false)
        #expect(machine.bodyTakerReady() == true)
        #expect(machine.bodyTakerReady() == false, "one paused read, read once")
    }

    // MARK: Malformed input, drain, close

    @Test("malformed bytes: answered and closed when no response has begun")
    func malformedWhileReading() {
        var idle = Machine(timeouts: Self.timeouts, now: Self.start)
        #expect(idle.parseFailed() == .answerAndClose(headArrived: false))
        #expect(idle.responseStarted() == true)
        #expect(idle.responseEnded(now: Self.start) == .close)

        var reading = Machine(timeouts: Self.timeouts, now: Self.start)
        _ = reading.partReceived(Self.head(method: .POST), now: Self.start)
        #expect(reading.parseFailed() == .answerAndClose(headArrived: true))
        #expect(reading.ignoresInput)
    }

    @Test("malformed bytes behind a request being answered: that answer is the last")
    func malformedWhileResponding() {
        var machine = Self.responding()
        #expect(machine.parseFailed() == .closeAfterResponse)
        #expect(machine.responseStarted() == true, "the answer says Connection: close")
        #expect(machine.responseEnded(now: Self.start) == .close)

        var streaming = Machine(timeouts: Self.timeouts, now: Self.start)
        _ = streaming.partReceived(Self.head(method: .POST), now: Self.start)
        _ = streaming.responseStarted()
        #expect(streaming.parseFailed() == .closeAfterResponse, "a response under way is not interrupted")
        #expect(streaming.responseEnded(now: Self.start) == .close)
    }

    @Test("a drain closes an idle connection at once, and makes a busy one's response the last")
    func quiesce() {
        var idle = Machine(timeouts: Self.timeouts, now: Self.start)
        #expect(idle.quiesce() == true)
        #expect(idle.isDraining)
        #expect(idle.ignoresInput)

        var busy = Self.responding()
        #expect(busy.quiesce() == false)
        #expect(busy.responseStarted() == true)
        #expect(busy.responseEnded(now: Self.start) == .close)

        var reading = Machine(timeouts: Self.timeouts, now: Self.start)
        reading.bytesReceived(now: Self.start)
        #expect(reading.quiesce() == false, "a request on its way is answered")
        _ = reading.partReceived(Self.head(), now: Self.start)
        _ = reading.partReceived(.end(nil), now: Self.start)
        #expect(reading.responseStarted() == true)
    }

    @Test("a close inside a request is reported, one between requests is not")
    func closedInsideRequest() {
        var between = Machine(timeouts: Self.timeouts, now: Self.start)
        #expect(between.closed() == false)
        var inside = Machine(timeouts: Self.timeouts, now: Self.start)
        inside.bytesReceived(now: Self.start)
        #expect(inside.closed() == true)
        #expect(inside.deadline == nil)
    }

    // MARK: Every sequence

    /// Drives the machine with random request parts, responses, deadlines, drains and failures, as a driver
    /// would, and checks what must hold whatever the order: every handled request is answered once and in
    /// order, nothing is handled after the last response, reading is never paused with nothing to wait for,
    /// and the deadline is the one the phase calls for.
    @Test("random sequences keep answers in order and nothing past the last response", arguments: 0..<200)
    func randomSequences(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var machine = Machine(timeouts: Self.timeouts, now: Self.start)
        var now = Self.start
        var sent = 0  // heads the client has sent
        var handled: [Int] = []  // heads handed over, by number
        var answered: [Int] = []
        var requestOpen = false  // the client is inside a request (head sent, end not)
        var awaitingAnswer: [Int] = []  // handled requests whose answer has not started
        var answering: Int?
        var closed = false

        func perform(_ action: Machine.PartAction) {
            switch action {
            case .handleHead(let head):
                let number = Int(head.uri.dropFirst())!
                #expect(handled.last.map { $0 + 1 == number } ?? (number == 0), "heads in order")
                handled.append(number)
                awaitingAnswer.append(number)
            case .stopReading:
                #expect(machine.ignoresInput)
            case .handleBody, .handleEnd, .drop, .holdBack:
                break
            }
        }

        for _ in 0..<60 where !closed {
            now = now + .milliseconds(Int64(random.next() % 4000))
            switch Int(random.next() % 8) {
            case 0, 1:
                let part: HTTPServerRequestPart
                if requestOpen {
                    part = Int(random.next() % 2) == 0 ? .body(ByteBuffer(string: "b")) : .end(nil)
                    if case .end = part { requestOpen = false }
                } else {
                    machine.bytesReceived(now: now)
                    part = Self.head("/\(sent)", keepAlive: Int(random.next() % 6) != 0)
                    sent += 1
                    requestOpen = true
                }
                perform(machine.partReceived(part, now: now))
            case 2, 3:
                // The driver answers the oldest handled request.
                if answering == nil, let next = awaitingAnswer.first {
                    awaitingAnswer.removeFirst()
                    answering = next
                    _ = machine.responseStarted()
                } else if let number = answering {
                    answering = nil
                    answered.append(number)
                    switch machine.responseEnded(now: now) {
                    case .close:
                        closed = true
                    case .waitForRequest, .dropRestOfBody:
                        break
                    case .handleHeldBack:
                        while let action = machine.nextHeldBackPart(now: now) { perform(action) }
                        if !machine.hasHeldBackParts {
                            _ = machine.heldBackPartsHandled(requestStarted: requestOpen, now: now)
                        }
                    }
                }
            case 4:
                switch machine.timerFired(now: now) {
                case .closeIdle, .close:
                    closed = true
                case .requestTimedOut:
                    #expect(machine.ignoresInput)
                case .none:
                    if let deadline = machine.deadline { #expect(deadline.at > now) }
                }
            case 5:
                if Int(random.next() % 4) == 0, machine.quiesce() { closed = true }
            case 6:
                _ = machine.readRequested()
                if !machine.hasHeldBackParts, Int(random.next() % 2) == 0 { _ = machine.bodyTakerReady() }
            default:
                if Int(random.next() % 10) == 0 {
                    switch machine.parseFailed() {
                    case .close: closed = true
                    case .answerAndClose, .closeAfterResponse: #expect(machine.ignoresInput)
                    }
                }
            }
            // Answers follow the order requests were handled in, each once.
            #expect(answered == Array(handled.prefix(answered.count)))
            if machine.ignoresInput { #expect(!machine.hasHeldBackParts) }
            if machine.isReadingRequest { #expect(machine.deadline == nil || machine.deadline?.kind == .request) }
        }
    }
}
