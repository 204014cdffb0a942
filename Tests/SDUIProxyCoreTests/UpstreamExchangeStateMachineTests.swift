import NIOCore
import SDUIProxyCore
import Testing

@Suite("The upstream exchange's state machine")
struct UpstreamExchangeStateMachineTests {
    typealias Machine = UpstreamExchangeStateMachine

    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
    static let headDeadline = start + .seconds(10)
    static let idle = TimeAmount.seconds(30)

    /// A machine with a fill in flight, sent at ``start``.
    static func filling(maxBodyBytes: Int = 100, retryIfStale: Bool = false) -> Machine {
        var machine = Machine()
        let action = machine.sendRequested(
            .fill(maxBodyBytes: maxBodyBytes),
            deadline: headDeadline,
            headTimeout: .zero,
            bodyIdleTimeout: idle,
            retryIfStale: retryIfStale,
            attached: true
        )
        #expect(action == .sendRequest(armTimer: headDeadline))
        return machine
    }

    /// A machine with a forward in flight whose body is still `uploading`.
    static func forwarding(uploading: Bool) -> Machine {
        var machine = Machine()
        let action = machine.sendRequested(
            .forward(uploading: uploading),
            deadline: headDeadline,
            headTimeout: .seconds(5),
            bodyIdleTimeout: idle,
            retryIfStale: false,
            attached: true
        )
        #expect(action == .sendRequest(armTimer: uploading ? nil : headDeadline))
        return machine
    }

    // MARK: Fills

    @Test("a fill's head, body and end: the idle clock from the head, the budget asked as the body needs")
    func wholeFill() {
        var machine = Self.filling()
        let head = Self.start + .seconds(1)
        #expect(
            machine.headReceived(keepAlive: true, length: 8, now: head)
                == .keepHead(reserve: 8, armTimer: head + Self.idle)
        )
        #expect(machine.hasHead)
        // With a length, the body was reserved whole at the head.
        #expect(machine.bodyPartReceived(size: 5, now: head) == .appendBody(reserve: nil))
        #expect(machine.bodyPartReceived(size: 3, now: head) == .appendBody(reserve: nil))
        #expect(machine.responseEnded() == .succeed(closeConnection: false))
        #expect(!machine.isExchanging)
        #expect(machine.isReusable)
    }

    @Test("without a length, each part is taken from the budget as it comes")
    func fillWithoutLength() {
        var machine = Self.filling()
        #expect(
            machine.headReceived(keepAlive: true, length: nil, now: Self.start)
                == .keepHead(reserve: nil, armTimer: Self.start + Self.idle)
        )
        #expect(machine.bodyPartReceived(size: 7, now: Self.start) == .appendBody(reserve: 7))
        #expect(machine.budgetExceeded(limit: 4) == .fail(.overBudget(4), closeConnection: true, mayResend: false))
        #expect(!machine.isReusable)
    }

    @Test("a declared length past maxBodyBytes fails at the head; a body that grows past it fails as it does")
    func tooLarge() {
        var declared = Self.filling(maxBodyBytes: 10)
        #expect(
            declared.headReceived(keepAlive: true, length: 11, now: Self.start)
                == .fail(.tooLarge(10), closeConnection: true, mayResend: false)
        )
        #expect(!declared.isReusable)

        var growing = Self.filling(maxBodyBytes: 10)
        _ = growing.headReceived(keepAlive: true, length: nil, now: Self.start)
        #expect(growing.bodyPartReceived(size: 10, now: Self.start) == .appendBody(reserve: 10))
        #expect(
            growing.bodyPartReceived(size: 1, now: Self.start)
                == .fail(.tooLarge(10), closeConnection: true, mayResend: false)
        )
    }

    @Test("a response that says close ends the connection after it")
    func closeAfterResponse() {
        var machine = Self.filling()
        _ = machine.headReceived(keepAlive: false, length: 0, now: Self.start)
        #expect(machine.responseEnded() == .succeed(closeConnection: true))
        #expect(!machine.isReusable)
    }

    @Test("the head's deadline, then the body's idle limit from its last part")
    func deadlines() {
        var waiting = Self.filling()
        #expect(waiting.timerFired(now: Self.headDeadline - .nanoseconds(1)) == .armTimer(Self.headDeadline))
        #expect(waiting.timerFired(now: Self.headDeadline) == .fail(.timedOut, closeConnection: true, mayResend: false))

        var body = Self.filling()
        let head = Self.start + .seconds(2)
        _ = body.headReceived(keepAlive: true, length: nil, now: head)
        let part = head + .seconds(20)
        _ = body.bodyPartReceived(size: 1, now: part)
        // The timer armed for the head's idle limit fires early for the part's: it is armed again.
        #expect(body.timerFired(now: head + Self.idle) == .armTimer(part + Self.idle))
        #expect(body.timerFired(now: part + Self.idle) == .fail(.bodyStalled, closeConnection: true, mayResend: false))
    }

    @Test("a reused connection that fails before any byte of the answer may send the request again, and not after")
    func resend() {
        var unanswered = Self.filling(retryIfStale: true)
        #expect(unanswered.mayRetry)
        #expect(
            unanswered.channelClosed(bodyEndsWithConnection: false)
                == .fail(.closedBeforeResponse, closeConnection: false, mayResend: true)
        )

        var reset = Self.filling(retryIfStale: true)
        #expect(
            reset.errorCaught(uncleanTLSShutdown: false, bytesPending: false)
                == .failWithCaughtError(asUnanswered: true, mayResend: true)
        )

        var partly = Self.filling(retryIfStale: true)
        #expect(
            partly.errorCaught(uncleanTLSShutdown: false, bytesPending: true)
                == .failWithCaughtError(asUnanswered: false, mayResend: true)
        )

        var interim = Self.filling(retryIfStale: true)
        #expect(interim.interimReceived() == .passInterim)
        #expect(!interim.mayRetry, "the client was passed the interim response")
        #expect(
            interim.channelClosed(bodyEndsWithConnection: false)
                == .fail(.closedBeforeResponse, closeConnection: false, mayResend: false)
        )

        var headed = Self.filling(retryIfStale: true)
        _ = headed.headReceived(keepAlive: true, length: 4, now: Self.start)
        #expect(
            headed.channelClosed(bodyEndsWithConnection: false)
                == .fail(.closedDuringResponse, closeConnection: false, mayResend: true)
        )
    }

    @Test("a body that runs to the close ends with it, unless a TLS backend closed without close_notify")
    func bodyToClose() {
        var clean = Self.filling()
        _ = clean.headReceived(keepAlive: false, length: nil, now: Self.start)
        #expect(clean.channelClosed(bodyEndsWithConnection: true) == .finishBodyAtClose)
        #expect(clean.responseEnded() == .succeed(closeConnection: true))

        var unclean = Self.filling()
        _ = unclean.headReceived(keepAlive: false, length: nil, now: Self.start)
        #expect(unclean.errorCaught(uncleanTLSShutdown: true, bytesPending: false) == .close)
        #expect(
            unclean.channelClosed(bodyEndsWithConnection: true)
                == .fail(.closedDuringResponse, closeConnection: false, mayResend: false)
        )

        var cut = Self.filling()
        _ = cut.headReceived(keepAlive: false, length: nil, now: Self.start)
        #expect(cut.channelClosed(bodyEndsWithConnection: true) == .finishBodyAtClose)
        #expect(cut.bodyAtCloseIncomplete() == .fail(.closedDuringResponse, closeConnection: false, mayResend: false))
    }

    @Test("one exchange at a time, on a connection still attached and reusable")
    func oneAtATime() {
        var machine = Self.filling()
        let again = machine.sendRequested(
            .fill(maxBodyBytes: 1),
            deadline: Self.headDeadline,
            headTimeout: .zero,
            bodyIdleTimeout: nil,
            retryIfStale: true,
            attached: true
        )
        #expect(again == .fail(.busy, closeConnection: false, mayResend: true))
        var detached = Machine()
        let lost = detached.sendRequested(
            .fill(maxBodyBytes: 1),
            deadline: Self.headDeadline,
            headTimeout: .zero,
            bodyIdleTimeout: nil,
            retryIfStale: false,
            attached: false
        )
        #expect(lost == .fail(.closedBeforeResponse, closeConnection: false, mayResend: false))
        var closed = Machine()
        closed.closing()
        let late = closed.sendRequested(
            .fill(maxBodyBytes: 1),
            deadline: Self.headDeadline,
            headTimeout: .zero,
            bodyIdleTimeout: nil,
            retryIfStale: false,
            attached: true
        )
        #expect(late == .fail(.closedBeforeResponse, closeConnection: false, mayResend: false))
    }

    @Test("a malformed response fails the exchange and closes the connection, which takes no other")
    func malformed() {
        var machine = Self.filling()
        let failure = HTTPParseFailure(kind: .network, reason: "bad status line")
        #expect(
            machine.malformedResponse(failure) == .fail(.malformed(failure), closeConnection: true, mayResend: false)
        )
        #expect(!machine.isReusable)
    }

    // MARK: Forwards

    @Test("a forward's backend time starts once its client's body is whole, and not while it uploads")
    func uploadIsTheClientsTime() {
        var machine = Self.forwarding(uploading: true)
        #expect(machine.timerFired(now: Self.headDeadline + .seconds(60)) == .none)
        let whole = Self.start + .seconds(100)
        #expect(machine.requestBodyEnded(now: whole) == .armTimer(whole + .seconds(5)))
        #expect(
            machine.timerFired(now: whole + .seconds(5)) == .fail(.timedOut, closeConnection: true, mayResend: false)
        )
    }

    @Test("an answer before the whole request went out ends the exchange and the connection with it")
    func earlyAnswer() {
        var machine = Self.forwarding(uploading: true)
        #expect(
            machine.headReceived(keepAlive: true, length: 0, now: Self.start)
                == .passHead(armTimer: Self.start + Self.idle)
        )
        #expect(machine.requestBodyEnded(now: Self.start) == .none, "the head is in: no deadline for it")
        #expect(machine.responseEnded() == .succeed(closeConnection: true))

        var written = Self.forwarding(uploading: true)
        written.requestBodyWritten()
        _ = written.headReceived(keepAlive: true, length: 0, now: Self.start)
        #expect(written.responseEnded() == .succeed(closeConnection: false))
    }

    @Test("reading waits while the client holds parts; the idle clock then counts the client's time")
    func clientPace() {
        var machine = Self.forwarding(uploading: false)
        _ = machine.headReceived(keepAlive: true, length: nil, now: Self.start)
        let part = Self.start + .seconds(1)
        #expect(machine.bodyPartReceived(size: 3, now: part) == .passBodyPart(armTimer: part + Self.idle))
        #expect(machine.readsPaused)
        #expect(machine.bodyPartTaken(failed: false, partsWithClient: 1, now: part) == .none)
        #expect(
            machine.timerFired(now: part + Self.idle) == .fail(.clientStalled, closeConnection: true, mayResend: false)
        )

        var taken = Self.forwarding(uploading: false)
        _ = taken.headReceived(keepAlive: true, length: nil, now: Self.start)
        _ = taken.bodyPartReceived(size: 3, now: part)
        let later = part + .seconds(2)
        #expect(
            taken.bodyPartTaken(failed: false, partsWithClient: 0, now: later)
                == .resumeReading(armTimer: later + Self.idle)
        )
        #expect(!taken.readsPaused)
        #expect(
            taken.timerFired(now: later + Self.idle) == .fail(.bodyStalled, closeConnection: true, mayResend: false)
        )

        var refused = Self.forwarding(uploading: false)
        _ = refused.headReceived(keepAlive: true, length: nil, now: Self.start)
        _ = refused.bodyPartReceived(size: 3, now: part)
        #expect(
            refused.bodyPartTaken(failed: true, partsWithClient: 0, now: part)
                == .fail(.abandoned, closeConnection: true, mayResend: false)
        )
    }

    @Test("a forward given up by its caller closes the connection under the request")
    func abandoned() {
        var machine = Self.forwarding(uploading: true)
        #expect(machine.exchangeAbandoned() == .fail(.abandoned, closeConnection: true, mayResend: false))
        #expect(machine.exchangeAbandoned() == .close, "already ended: only the close is left")
    }

    // MARK: Any sequence

    /// Drives the machine with random events, as the handler would report them, and checks what must hold
    /// whatever the order: every exchange sent ends exactly once, a connection that closed takes no other
    /// exchange, and an exchange that has its head is never sent again.
    @Test("random sequences end every exchange exactly once and never reuse a closed connection", arguments: 0..<100)
    func randomSequences(seed: UInt64) {
        var random = SplitMix64(seed: seed &+ 0x00E5)
        var machine = Machine()
        var now = Self.start
        var open = 0
        var ended = 0
        var closed = false
        /// Whether the exchange in flight has had any answer (an interim response or its head).
        var answered = false
        for _ in 0..<300 {
            now = now + .milliseconds(Int64(random.next() % 20_000))
            let action: Machine.Action
            switch random.next() % 14 {
            case 0, 1:
                let kind: Machine.Kind =
                    random.next() % 2 == 0
                    ? .fill(maxBodyBytes: Int(random.next() % 64)) : .forward(uploading: random.next() % 2 == 0)
                let wasExchanging = machine.isExchanging
                let reusable = machine.isReusable
                action = machine.sendRequested(
                    kind,
                    deadline: now + .seconds(10),
                    headTimeout: .seconds(5),
                    bodyIdleTimeout: random.next() % 3 == 0 ? nil : .seconds(30),
                    retryIfStale: random.next() % 2 == 0,
                    attached: !closed
                )
                guard case .sendRequest = action else {
                    // Refused: this exchange never started, and ends at its caller.
                    #expect(wasExchanging || !reusable || closed, "a free connection refused an exchange")
                    continue
                }
                #expect(!wasExchanging && reusable && !closed, "sent on a busy or closed connection")
                open += 1
                answered = false
                continue
            case 2:
                if machine.isExchanging { answered = true }
                action = machine.interimReceived()
            case 3:
                if machine.isExchanging { answered = true }
                action = machine.headReceived(
                    keepAlive: random.next() % 4 != 0,
                    length: random.next() % 2 == 0 ? Int(random.next() % 80) : nil,
                    now: now
                )
            case 4, 5: action = machine.bodyPartReceived(size: Int(random.next() % 30), now: now)
            case 6:
                action = machine.bodyPartTaken(
                    failed: random.next() % 5 == 0,
                    partsWithClient: Int(random.next() % 2),
                    now: now
                )
            case 7: action = machine.responseEnded()
            case 8: action = machine.timerFired(now: now)
            case 9: action = machine.requestBodyEnded(now: now)
            case 10:
                machine.requestBodyWritten()
                continue
            case 11:
                closed = true
                action = machine.channelClosed(bodyEndsWithConnection: random.next() % 2 == 0)
                if action == .finishBodyAtClose {
                    let finished = random.next() % 2 == 0 ? machine.responseEnded() : machine.bodyAtCloseIncomplete()
                    count(finished)
                    continue
                }
            case 12:
                action = machine.errorCaught(
                    uncleanTLSShutdown: random.next() % 3 == 0,
                    bytesPending: random.next() % 2 == 0
                )
            default: action = machine.budgetExceeded(limit: 1)
            }
            count(action)
        }

        func count(_ action: Machine.Action) {
            switch action {
            case .succeed(let closeConnection):
                ended += 1
                if closeConnection { #expect(!machine.isReusable) }
            case .fail(let failure, let closeConnection, let mayResend):
                ended += 1
                if closeConnection { #expect(!machine.isReusable) }
                if answered, failure == .closedBeforeResponse, mayResend {
                    Issue.record("an exchange with an answer begun would be sent again")
                }
            case .failWithCaughtError(let asUnanswered, let mayResend):
                ended += 1
                #expect(!machine.isReusable)
                if answered, asUnanswered, mayResend {
                    Issue.record("an exchange with an answer begun would be sent again")
                }
            default:
                break
            }
            #expect(ended <= open, "an exchange ended twice")
            #expect(ended + (machine.isExchanging ? 1 : 0) == open, "an exchange sent was lost or ended twice")
        }
    }
}
