import SDUIProxyCore
import Testing

/// The decisions about local identifiers: a create accepted once while pending, writes waiting for their creates
/// or rewritten at once, a delivered create merged into its dependents, a failed one failing them, and what is
/// remembered for the retention.
@Suite("The ledger of local identifiers: who waits for which create, and what a create's outcome does")
struct LocalIdentifierLedgerTests {
    static let order = LocalIdentifier("tmp-7f3a")!
    static let cart = LocalIdentifier("tmp-c1")!
    static let remote = RemoteIdentifier("R1")!
    static let start = QueueInstant(millisecondsSinceEpoch: 1_000_000)

    @Test(
        "the same local identifier created twice while pending is a conflict; once it has an outcome, a create starts afresh"
    )
    func createsWhilePending() {
        var ledger = LocalIdentifierLedger(retention: .seconds(60))
        #expect(ledger.createAccepted(Self.order, create: "q1") == .record)
        #expect(ledger.createAccepted(Self.order, create: "q2") == .conflict(existing: "q1"))
        #expect(ledger.pending == [Self.order])
        _ = ledger.createDelivered(Self.order, remote: Self.remote, at: Self.start)
        #expect(ledger.pending.isEmpty)
        #expect(ledger.createAccepted(Self.order, create: "q3") == .record)
    }

    @Test("a write naming a pending identifier waits for its create; its create's delivery names it for the merge")
    func dependentsWaitThenMerge() {
        var ledger = LocalIdentifierLedger(retention: .seconds(60))
        _ = ledger.createAccepted(Self.order, create: "q1")
        #expect(ledger.writeAccepted("q2", naming: [Self.order]) == .init(waitsFor: ["q1"]))
        #expect(ledger.writeAccepted("q3", naming: [Self.order, Self.order]) == .init(waitsFor: ["q1"]))
        // The create names itself (its own body holds the local id): it waits for nothing.
        #expect(ledger.writeAccepted("q1", naming: [Self.order]) == .init())
        #expect(ledger.createDelivered(Self.order, remote: Self.remote, at: Self.start) == ["q2", "q3"])
        // Later writes are rewritten as they arrive, and wait for nothing.
        #expect(ledger.writeAccepted("q4", naming: [Self.order]) == .init(rewrite: [Self.order: Self.remote]))
        #expect(ledger.createDelivered(Self.order, remote: Self.remote, at: Self.start).isEmpty, "delivered once")
    }

    @Test("a failed create fails its dependents, and a later write that names it, with the reason")
    func failedCreate() {
        var ledger = LocalIdentifierLedger(retention: .seconds(60))
        _ = ledger.createAccepted(Self.order, create: "q1")
        _ = ledger.writeAccepted("q2", naming: [Self.order])
        #expect(ledger.createFailed(Self.order, reason: "422 Unprocessable Content", at: Self.start) == ["q2"])
        let later = ledger.writeAccepted("q3", naming: [Self.order])
        #expect(later.dependencyFailed == "the create of tmp-7f3a failed: 422 Unprocessable Content")
        #expect(later.waitsFor.isEmpty)
    }

    @Test("a write naming several identifiers waits for each pending create and is rewritten for each merged one")
    func mixed() {
        var ledger = LocalIdentifierLedger(retention: .seconds(60))
        _ = ledger.createAccepted(Self.order, create: "q1")
        _ = ledger.createAccepted(Self.cart, create: "q2")
        _ = ledger.createDelivered(Self.cart, remote: RemoteIdentifier("C9")!, at: Self.start)
        let decision = ledger.writeAccepted("q3", naming: [Self.cart, Self.order, LocalIdentifier("tmp-unknown")!])
        #expect(decision == .init(rewrite: [Self.cart: RemoteIdentifier("C9")!], waitsFor: ["q1"]))
    }

    @Test("merged and failed identifiers are forgotten after the retention; pending ones are kept however old")
    func retention() {
        var ledger = LocalIdentifierLedger(retention: .seconds(60))
        _ = ledger.createAccepted(Self.order, create: "q1")
        _ = ledger.createAccepted(Self.cart, create: "q2")
        _ = ledger.createDelivered(Self.cart, remote: Self.remote, at: Self.start)
        ledger.expire(at: Self.start.advanced(by: .seconds(59)))
        #expect(ledger.known == [Self.order, Self.cart])
        ledger.expire(at: Self.start.advanced(by: .seconds(60)))
        #expect(ledger.known == [Self.order])
        #expect(ledger.writeAccepted("q3", naming: [Self.cart]) == .init())
    }

    @Test("what a store holds of another process's create is taken in; a pending create keeps its known dependents")
    func rememberedFromTheStore() {
        var ledger = LocalIdentifierLedger(retention: .seconds(60))
        _ = ledger.createAccepted(Self.order, create: "q1")
        _ = ledger.writeAccepted("w1", naming: [Self.order])
        ledger.remember(Self.order, as: .pending(create: "q1", dependents: []))
        #expect(ledger.standings[Self.order] == .pending(create: "q1", dependents: ["w1"]))
        let until = Self.start.advanced(by: .seconds(60))
        ledger.remember(Self.cart, as: .merged(remote: Self.remote, until: until))
        #expect(ledger.writeAccepted("w2", naming: [Self.cart]).rewrite == [Self.cart: Self.remote])
        ledger.remember(Self.order, as: .failed(reason: "422", until: until))
        #expect(ledger.writeAccepted("w3", naming: [Self.order]).dependencyFailed?.contains("422") == true)
    }
}
