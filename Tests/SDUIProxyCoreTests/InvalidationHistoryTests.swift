import NIOCore
import SDUIProxyCore
import Testing

@Suite("Invalidations while a fill is in flight: what the fill may store, and who may join it")
struct InvalidationHistoryTests {
    private static let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    private static func history(retention: TimeAmount = .seconds(35), maximumRecords: Int = 100) -> InvalidationHistory
    {
        InvalidationHistory(retention: retention, maximumRecords: maximumRecords)
    }

    @Test("a fill no invalidation came after stores; one that came before it started does not concern it")
    func noneSince() {
        var history = Self.history()
        _ = history.record(CacheInvalidation(.targets(["/a"])), at: Self.start)
        let ticket = history.beginFill(target: "/a")
        #expect(history.verdict(for: ticket, target: "/a", tags: []) == .store)
        #expect(history.mayJoin(runStartedAfter: ticket.sequence, target: "/a"))
    }

    static let reaching: [(CacheInvalidation.Scope, reaches: Bool)] = [
        (.targets(["/x", "/screens/1"]), true),
        (.targets(["/screens/10"]), false),
        (.prefix("/screens"), true),
        (.prefix("/screens/2"), false),
        (.tag("home"), true),
        (.tag("other"), false),
        (.all, true),
    ]

    @Test(
        "a hard invalidation since the fill started voids the answer it reaches, by target, prefix, tag or all",
        arguments: reaching
    )
    func hard(scope: CacheInvalidation.Scope, reaches: Bool) {
        var history = Self.history()
        let ticket = history.beginFill(target: "/screens/1")
        let (sequence, fills) = history.record(CacheInvalidation(scope), at: Self.start)
        #expect(sequence == ticket.sequence + 1)
        // A tag may reach any fill in flight: its tags are not known yet.
        let mayReach: Bool = if case .tag = scope { true } else { reaches }
        #expect(fills == (mayReach ? 1 : 0))
        let verdict = history.verdict(for: ticket, target: "/screens/1", tags: ["home", "screens"])
        if reaches {
            guard case .discard = verdict else {
                Issue.record("expected a discard, got \(verdict)")
                return
            }
        } else {
            #expect(verdict == .store)
        }
        // Nobody joins a fill that an invalidation may have reached since it started.
        #expect(history.mayJoin(runStartedAfter: ticket.sequence, target: "/screens/1") == !mayReach)
    }

    @Test("a soft invalidation has the answer stored stale as of the first one that reaches it")
    func soft() {
        var history = Self.history()
        let ticket = history.beginFill(target: "/s")
        _ = history.record(CacheInvalidation(.targets(["/other"]), soft: true), at: Self.start)
        _ = history.record(CacheInvalidation(.prefix("/"), soft: true), at: Self.start + .seconds(1))
        _ = history.record(CacheInvalidation(.targets(["/s"]), soft: true), at: Self.start + .seconds(2))
        #expect(history.verdict(for: ticket, target: "/s", tags: []) == .storeStale(asOf: Self.start + .seconds(1)))
        #expect(!history.mayJoin(runStartedAfter: ticket.sequence, target: "/s"))
    }

    @Test("a hard invalidation wins over a soft one, in either order")
    func hardOverSoft() {
        for hardFirst in [true, false] {
            var history = Self.history()
            let ticket = history.beginFill(target: "/s")
            let hard = CacheInvalidation(.targets(["/s"]))
            let soft = CacheInvalidation(.targets(["/s"]), soft: true)
            let ordered: [CacheInvalidation] = hardFirst ? [hard, soft] : [soft, hard]
            for index in ordered.indices {
                _ = history.record(ordered[index], at: Self.start + .seconds(Int64(index)))
            }
            guard case .discard(let reason) = history.verdict(for: ticket, target: "/s", tags: []) else {
                Issue.record("expected a discard")
                continue
            }
            #expect(reason.contains("targets /s"))
        }
    }

    @Test("a fill's answer is judged by the invalidations after its own start, not another fill's")
    func perFill() {
        var history = Self.history()
        let early = history.beginFill(target: "/a")
        _ = history.record(CacheInvalidation(.targets(["/a"])), at: Self.start)
        let late = history.beginFill(target: "/a")
        #expect(history.verdict(for: late, target: "/a", tags: []) == .store)
        #expect(history.verdict(for: early, target: "/a", tags: []) != .store)
        #expect(history.mayJoin(runStartedAfter: late.sequence, target: "/a"))
    }

    @Test("the fills in flight an invalidation reaches are counted, and ended fills are not")
    func fillCounts() {
        var history = Self.history()
        let a = history.beginFill(target: "/screens/a")
        _ = history.beginFill(target: "/screens/b")
        _ = history.beginFill(target: "/other")
        #expect(history.fillCount == 3)
        #expect(history.record(CacheInvalidation(.prefix("/screens")), at: Self.start).fillsReached == 2)
        history.endFill(a)
        #expect(history.fillCount == 2)
        #expect(history.record(CacheInvalidation(.prefix("/screens")), at: Self.start).fillsReached == 1)
        #expect(history.record(CacheInvalidation(.tag("t")), at: Self.start).fillsReached == 2)
        #expect(history.record(CacheInvalidation(.all, soft: true), at: Self.start).fillsReached == 2)
    }

    @Test("invalidations past the retention are forgotten, and a fill that started before one of them is not stored")
    func retention() {
        var history = Self.history(retention: .seconds(35))
        let old = history.beginFill(target: "/slow")
        _ = history.record(CacheInvalidation(.targets(["/elsewhere"])), at: Self.start)
        let recent = history.beginFill(target: "/slow")
        // Within the retention, the record is known not to reach /slow.
        #expect(history.verdict(for: old, target: "/slow", tags: []) == .store)
        // A record 36 s later forgets the first: the fill that started before it can no longer be told.
        _ = history.record(CacheInvalidation(.targets(["/elsewhere"])), at: Self.start + .seconds(36))
        guard case .discard(let reason) = history.verdict(for: old, target: "/slow", tags: []) else {
            Issue.record("expected a discard for a fill older than what is remembered")
            return
        }
        #expect(reason.contains("outlasted"))
        #expect(!history.mayJoin(runStartedAfter: old.sequence, target: "/slow"))
        // The fill that started after the forgotten record is judged as ever.
        #expect(history.verdict(for: recent, target: "/slow", tags: []) == .store)
        #expect(history.mayJoin(runStartedAfter: recent.sequence, target: "/slow"))
    }

    @Test("at most the maximum number of records is kept, however recent")
    func maximumRecords() {
        var history = Self.history(retention: .hours(1), maximumRecords: 3)
        let ticket = history.beginFill(target: "/a")
        for index in 0..<3 {
            _ = history.record(CacheInvalidation(.targets(["/b\(index)"])), at: Self.start)
        }
        #expect(history.verdict(for: ticket, target: "/a", tags: []) == .store)
        _ = history.record(CacheInvalidation(.targets(["/b3"])), at: Self.start)
        #expect(history.verdict(for: ticket, target: "/a", tags: []) != .store)
        #expect(history.lastSequence == 4)
    }

    @Test("random sequences: the verdict is what a full record of every invalidation says")
    func randomSequences() {
        var generator = SystemRandomNumberGenerator()
        let targets = ["/a", "/a/1", "/b", "/b?x=1"]
        let tags = ["t1", "t2"]
        for _ in 0..<200 {
            var history = Self.history(retention: .hours(1))
            var all: [(sequence: UInt64, invalidation: CacheInvalidation, time: NIODeadline)] = []
            var tickets: [(InvalidationHistory.Ticket, String)] = []
            for step in 0..<20 {
                if Bool.random(using: &generator) {
                    let target = targets.randomElement(using: &generator)!
                    tickets.append((history.beginFill(target: target), target))
                } else {
                    let scope: CacheInvalidation.Scope =
                        switch Int.random(in: 0..<4, using: &generator) {
                        case 0: .targets([targets.randomElement(using: &generator)!])
                        case 1: .prefix(["/a", "/b"].randomElement(using: &generator)!)
                        case 2: .tag(tags.randomElement(using: &generator)!)
                        default: .all
                        }
                    let invalidation = CacheInvalidation(scope, soft: Bool.random(using: &generator))
                    let time = Self.start + .seconds(Int64(step))
                    let (sequence, _) = history.record(invalidation, at: time)
                    all.append((sequence, invalidation, time))
                }
            }
            for (ticket, target) in tickets {
                let answerTags = tags.filter { _ in Bool.random(using: &generator) }
                let reaching = all.filter {
                    $0.sequence > ticket.sequence && $0.invalidation.mayReach(target: target, tags: answerTags)
                }
                let verdict = history.verdict(for: ticket, target: target, tags: answerTags)
                if reaching.isEmpty {
                    #expect(verdict == .store)
                } else if reaching.contains(where: { !$0.invalidation.soft }) {
                    #expect(verdict.isDiscard)
                } else {
                    #expect(verdict == .storeStale(asOf: reaching[0].time))
                }
                let mayReach = all.contains {
                    $0.sequence > ticket.sequence && $0.invalidation.mayReach(target: target, tags: nil)
                }
                #expect(history.mayJoin(runStartedAfter: ticket.sequence, target: target) == !mayReach)
            }
        }
    }
}

extension InvalidationHistory.Verdict {
    fileprivate var isDiscard: Bool {
        if case .discard = self { true } else { false }
    }
}
