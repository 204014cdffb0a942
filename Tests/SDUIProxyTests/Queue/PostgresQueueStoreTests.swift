import Foundation
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import Prometheus
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The shared write queue's store over a real PostgreSQL server, as two or three replicas see it: claims are
/// leases, only the holder records, and what one replica wrote every other reads the same.
@Suite(
    "the write queue in PostgreSQL: replicas share it and claim what they deliver",
    .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.unavailableReason),
    .postgresServer,
    .serialized
)
struct PostgresQueueStoreTests {
    private let logger = Logger(label: "sdui-proxy.tests.queue.postgres") { _ in SwiftLogNoOpLogHandler() }

    /// A replica's store over `url`.
    private func store(
        _ name: String,
        _ url: PostgresURL,
        leaseTimeout: Duration = .seconds(30),
        cleanupInterval: Duration = .seconds(3600),
        operationTimeout: Duration = .seconds(30),
        registry: PrometheusCollectorRegistry? = nil
    ) -> PostgresQueueStore {
        var settings = PostgresQueueStore.Settings(
            owner: QueueClaimRules.owner(replicaName: name),
            leaseTimeout: leaseTimeout,
            cleanupInterval: cleanupInterval
        )
        // Long by default: a machine starting hundreds of tests at once has kept a login waiting for seconds, and
        // only the test of a stopped database looks at how soon an operation gives up.
        settings.operationTimeout = operationTimeout
        return PostgresQueueStore(
            url: url,
            replicaName: name,
            settings: settings,
            metrics: registry.map(QueueClaimMetrics.init(registry:)),
            logger: logger
        )
    }

    private func entry(
        _ id: String,
        route: String = "POST /api",
        at time: QueueInstant = .now(),
        body: ByteBuffer? = nil
    ) -> QueueEntry {
        QueueTest.entry(id, route: route, at: time, body: body)
    }

    private func closing<Result>(
        _ stores: [PostgresQueueStore],
        _ body: () async throws -> Result
    ) async throws -> Result {
        do {
            let result = try await body()
            for store in stores { try await store.close() }
            return result
        } catch {
            for store in stores { try? await store.close() }
            throw error
        }
    }

    private func claimedID(_ claim: QueueHeadClaim) -> String? {
        if case .claimed(let entry) = claim { return entry.id }
        return nil
    }

    private func waitTime(_ claim: QueueHeadClaim) -> QueueInstant? {
        if case .notBefore(let time) = claim { return time }
        return nil
    }

    /// Whether `time` is `expected` to within what moving it onto the database's clock and back may add. Each store
    /// measures the clocks' offset to within half the round trip of its measuring query, and a time written by one
    /// store and read by another carries both errors: tens of milliseconds on a loaded machine (62 ms seen), where
    /// a wrong conversion (the offset applied twice, a time zone) is hours off.
    private func about(_ time: QueueInstant?, _ expected: QueueInstant) -> Bool {
        guard let time else { return false }
        return abs(time.millisecondsSinceEpoch - expected.millisecondsSinceEpoch) <= 1000
    }

    @Test("what one replica queued, another reads whole: headers, body, status, depths")
    func entriesAreSharedWhole() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let (a, b) = (store("a", url), store("b", url))
        try await closing([a, b]) {
            let body = ByteBuffer(bytes: [0, 1, 2, 255, 10, 13])
            let queuedAt = QueueInstant(millisecondsSinceEpoch: QueueInstant.now().millisecondsSinceEpoch - 10)
            try await a.insert(entry("first", at: queuedAt, body: body))
            try await a.insert(entry("second"))
            try await a.insert(entry("other", route: "PUT /profile"))

            let head = try #require(try await b.firstPending(route: "POST /api"))
            #expect(head.id == "first")
            #expect(head.body == body)
            #expect(head.headers["X-Tag"] == ["a", "b"])
            #expect(head.headers["X-Empty"] == [""])
            #expect(head.target == "/api/first?q=1")
            #expect(about(head.enqueuedAt, queuedAt))

            #expect(try await b.pendingCount() == 3)
            let depths = try await b.depths()
            #expect(depths.map(\.route) == ["POST /api", "PUT /profile"])
            #expect(depths.map(\.depth) == [2, 1])
            #expect(about(depths.first?.oldestEnqueuedAt, queuedAt))
            #expect(try await b.status(id: "second")?.state == .pending)
            #expect(try await b.status(id: "nothing") == nil)

            // The same id twice is refused, never stored twice, and the log says why.
            let duplicate = await #expect(throws: QueueStoreError.self) { try await b.insert(entry("first")) }
            #expect(duplicate?.message.contains("duplicate key") == true, "\(String(describing: duplicate))")
            #expect(try await a.pendingCount() == 3)
        }
    }

    @Test("a sequential route's head goes to one replica; the next one only after its outcome is recorded")
    func oneHeadInFlightAcrossReplicas() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let (a, b) = (store("a", url), store("b", url))
        try await closing([a, b]) {
            for id in ["1", "2", "3"] { try await a.insert(entry(id)) }
            #expect(claimedID(try await a.claimHead(route: "POST /api", at: .now())) == "1")
            // Held by a: b waits for the lease, and never gets the second request past it.
            let wait = try #require(waitTime(try await b.claimHead(route: "POST /api", at: .now())))
            #expect(wait > QueueInstant.now().advanced(by: .seconds(20)))
            #expect(waitTime(try await b.claimHead(route: "POST /api", at: .now().advanced(by: .seconds(5)))) != nil)

            // A failed attempt keeps "1" at the head, backing off.
            let retryAt = QueueInstant.now().advanced(by: .seconds(60))
            try await a.recordAttempt(id: "1", attempts: 1, nextAttemptAt: retryAt, lastError: "503", status: 503)
            #expect(try await b.status(id: "1")?.lastError == "503")
            #expect(about(waitTime(try await b.claimHead(route: "POST /api", at: .now())), retryAt))
            // Asked as of just after that time (times move between clocks to within a few milliseconds).
            #expect(
                claimedID(try await b.claimHead(route: "POST /api", at: retryAt.advanced(by: .milliseconds(100))))
                    == "1"
            )
            #expect(
                try await b.markDelivered(id: "1", status: 201, attempts: 2, at: .now(), awaitingNotification: false)
            )
            #expect(claimedID(try await a.claimHead(route: "POST /api", at: .now())) == "2")
            #expect(try await b.status(id: "1")?.status == 201)
            // Delivered: the failed attempt before it is history, and its error is not shown.
            #expect(try await b.status(id: "1")?.lastError == nil)
            // A recording tried again after its answer was lost (the change had committed) is still this
            // replica's, and says so; another replica's is not.
            #expect(
                try await b.markDelivered(id: "1", status: 201, attempts: 2, at: .now(), awaitingNotification: false)
            )
            #expect(
                try await !a.markDelivered(id: "1", status: 201, attempts: 2, at: .now(), awaitingNotification: false)
            )
            #expect(try await b.status(id: "1")?.attempts == 2)
        }
    }

    @Test("inserts on a sequential route wait their turn under the route's lock; a concurrent route's take none")
    func insertsLockOrderedRoutesOnly() async throws {
        let server = try #require(PostgresTestServer.current)
        let url = try await server.makeDatabase()
        var settings = PostgresQueueStore.Settings(
            owner: QueueClaimRules.owner(replicaName: "a"),
            leaseTimeout: .seconds(30),
            cleanupInterval: .seconds(3600)
        )
        settings.concurrentRoutes = ["POST /c"]
        let a = PostgresQueueStore(url: url, replicaName: "a", settings: settings, logger: logger)
        try await closing([a]) {
            _ = try await a.pendingCount()
            try await server.withConnection(url) { holder in
                // Another session holds both routes' insert locks.
                for route in ["POST /api", "POST /c"] {
                    try await holder.query(
                        "SELECT pg_advisory_lock(\(PostgresQueueStore.insertLockKey), hashtext(\(route)))",
                        logger: logger
                    )
                }
                try await a.insert(entry("unordered", route: "POST /c"))
                let ordered = Task { try await a.insert(entry("ordered", route: "POST /api")) }
                // The ordered insert waits on its lock (it shows in pg_locks as not granted) until it is let go.
                try await waitUntil {
                    let rows = try await holder.query(
                        "SELECT count(*)::bigint FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                        logger: logger
                    )
                    for try await count in rows.decode(Int.self) { return count == 1 }
                    return false
                }
                #expect(try await a.status(id: "ordered") == nil)
                try await holder.query("SELECT pg_advisory_unlock_all()", logger: logger)
                try await ordered.value
            }
            #expect(try await a.status(id: "ordered")?.state == .pending)
            #expect(try await a.status(id: "unordered")?.state == .pending)
        }
    }

    @Test("replicas asking for a sequential route's head at once: exactly one gets it")
    func parallelHeadClaims() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let stores = (0..<6).map { store("r\($0)", url) }
        try await closing(stores) {
            for id in ["h", "i", "j"] { try await stores[0].insert(entry(id)) }
            for round in 0..<5 {
                let claims = try await withThrowingTaskGroup(of: String?.self) { group in
                    for store in stores {
                        group.addTask { self.claimedID(try await store.claimHead(route: "POST /api", at: .now())) }
                    }
                    return try await group.reduce(into: [String]()) { if let id = $1 { $0.append(id) } }
                }
                #expect(claims == ["h"], "round \(round)")
            }
        }
    }

    @Test("the store's sessions end a transaction left idle, probe a silent peer, and bound lock waits")
    func sessionSafeguards() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let a = store("a", url)
        let settings = try await closing([a]) {
            var values: [String: String] = [:]
            for name in [
                "idle_in_transaction_session_timeout", "lock_timeout", "tcp_keepalives_idle", "tcp_keepalives_count",
            ] {
                values[name] = try await a.sessionSetting(name)
            }
            values["refused"] = try await a.sessionSetting("no such; setting")
            return values
        }
        #expect(
            settings == [
                "idle_in_transaction_session_timeout": "10s", "lock_timeout": "5s", "tcp_keepalives_idle": "10",
                "tcp_keepalives_count": "3",
            ]
        )
    }

    @Test("replicas claiming the same concurrent routes at once never claim one request twice")
    func concurrentClaimsDoNotOverlap() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let stores = [store("a", url), store("b", url), store("c", url)]
        try await closing(stores) {
            let ids = (0..<60).map { "w\($0)" }
            for (index, id) in ids.enumerated() {
                try await stores[index % 3].insert(entry(id, route: index.isMultiple(of: 2) ? "POST /a" : "POST /b"))
            }
            let claimed = try await withThrowingTaskGroup(of: [String].self) { group in
                for store in stores {
                    group.addTask {
                        var mine: [String] = []
                        for _ in 0..<30 {
                            let batch = try await store.claimDue(
                                routes: ["POST /a", "POST /b"],
                                at: .now(),
                                excluding: Set(mine),
                                limit: 4
                            )
                            if batch.isEmpty { break }
                            mine += batch.map(\.id)
                        }
                        return mine
                    }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            #expect(claimed.count == ids.count)
            #expect(Set(claimed) == Set(ids))
        }
    }

    @Test("a lease that runs out is taken over; its first holder can then neither renew nor record")
    func expiredLeaseIsTakenOver() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let registry = PrometheusCollectorRegistry()
        // Seconds, not milliseconds: b must find the lease still running, and a loaded machine may take a second
        // between a's claim and b's.
        let a = store("a", url, leaseTimeout: .seconds(3))
        let b = store("b", url, leaseTimeout: .seconds(3), registry: registry)
        try await closing([a, b]) {
            // b's connection is opened first, so that b's claim below is one query, not a connection set up.
            _ = try await b.pendingCount()
            try await a.insert(entry("only"))
            #expect(claimedID(try await a.claimHead(route: "POST /api", at: .now())) == "only")
            let until = try #require(waitTime(try await b.claimHead(route: "POST /api", at: .now())))
            try await Task.sleep(for: until.duration(since: .now()) + .milliseconds(20))
            var claim = try await b.claimHead(route: "POST /api", at: .now())
            // The database's clock may be a little behind this one's: look again, a bounded number of times.
            for _ in 0..<40 where claimedID(claim) == nil {
                try await Task.sleep(for: .milliseconds(50))
                claim = try await b.claimHead(route: "POST /api", at: .now())
            }
            #expect(claimedID(claim) == "only")
            #expect(try await !a.renewClaim(id: "only"))
            #expect(
                try await !a.markDelivered(
                    id: "only",
                    status: 200,
                    attempts: 1,
                    at: .now(),
                    awaitingNotification: false
                )
            )
            #expect(
                try await b.markDelivered(id: "only", status: 200, attempts: 1, at: .now(), awaitingNotification: false)
            )
            var bytes: [UInt8] = []
            registry.emit(into: &bytes)
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(text.contains("sdui_queue_claims_total 1"))
            #expect(text.contains("sdui_queue_lease_expiries_total 1"))
        }
    }

    @Test("a renewed lease moves its end forward, and another replica keeps waiting")
    func renewalExtendsTheLease() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let (a, b) = (store("a", url, leaseTimeout: .seconds(10)), store("b", url, leaseTimeout: .seconds(10)))
        try await closing([a, b]) {
            try await a.insert(entry("held", route: "POST /c"))
            #expect(
                try await a.claimDue(routes: ["POST /c"], at: .now(), excluding: [], limit: 5).map(\.id) == ["held"]
            )
            let before = try #require(try await b.earliestAttempt(routes: ["POST /c"], excluding: []))
            try await Task.sleep(for: .milliseconds(30))
            #expect(try await a.renewClaim(id: "held"))
            let after = try #require(try await b.earliestAttempt(routes: ["POST /c"], excluding: []))
            #expect(after > before)
            #expect(after > QueueInstant.now().advanced(by: .seconds(5)))
            #expect(try await b.claimDue(routes: ["POST /c"], at: .now(), excluding: [], limit: 5).isEmpty)

            // Released (a stop before the delivery began): another replica claims it at once.
            try await a.releaseClaims(ids: ["held"])
            #expect(
                try await b.claimDue(routes: ["POST /c"], at: .now(), excluding: [], limit: 5).map(\.id) == ["held"]
            )
        }
    }

    @Test("an outcome's notification belongs to the replica that recorded it, until its lease runs out")
    func notificationsAreLeased() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        // Seconds, not milliseconds: b must look while a's lease still runs, on a loaded machine too.
        let a = store("a", url, leaseTimeout: .seconds(3))
        let b = store("b", url, leaseTimeout: .seconds(3))
        try await closing([a, b]) {
            // b's connection is opened first, so that b's look below is one query, not a connection set up.
            _ = try await b.pendingCount()
            try await a.insert(entry("done"))
            #expect(claimedID(try await a.claimHead(route: "POST /api", at: .now())) == "done")
            #expect(
                try await a.markFailed(
                    id: "done",
                    lastError: "the backend answered 422",
                    status: 422,
                    attempts: 1,
                    at: .now(),
                    awaitingNotification: true
                )
            )
            #expect(try await b.unnotifiedOutcomes(limit: 10).isEmpty)
            let mine = try await a.unnotifiedOutcomes(limit: 10)
            #expect(mine.map(\.id) == ["done"])
            #expect(mine.first?.outcome == .failed)
            #expect(mine.first?.error == "the backend answered 422")

            // a stops renewing (it died): b takes the notification over.
            var taken: [QueueOutcomeEvent] = []
            for _ in 0..<160 where taken.isEmpty {
                try await Task.sleep(for: .milliseconds(50))
                taken = try await b.unnotifiedOutcomes(limit: 10)
            }
            #expect(taken.map(\.id) == ["done"])
            try await b.markNotified(id: "done")
            #expect(try await a.unnotifiedOutcomes(limit: 10).isEmpty)
            #expect(try await b.unnotifiedOutcomes(limit: 10).isEmpty)
        }
    }

    @Test("finished requests are removed by one replica per interval")
    func cleanupRunsOncePerInterval() async throws {
        let url = try await #require(PostgresTestServer.current).makeDatabase()
        let (a, b) = (store("a", url), store("b", url))
        try await closing([a, b]) {
            for id in ["x", "y", "kept"] { try await a.insert(entry(id, route: "POST /c")) }
            let claimed = try await a.claimDue(routes: ["POST /c"], at: .now(), excluding: [], limit: 2)
            for entry in claimed {
                #expect(
                    try await a.markDelivered(
                        id: entry.id,
                        status: 200,
                        attempts: 1,
                        at: .now(),
                        awaitingNotification: false
                    )
                )
            }
            let later = QueueInstant.now().advanced(by: .seconds(1))
            #expect(try await b.removeFinished(before: later) == 2)
            try await a.insert(entry("z", route: "POST /c"))
            #expect(
                try await a.claimDue(routes: ["POST /c"], at: .now(), excluding: ["kept"], limit: 1).map(\.id) == ["z"]
            )
            #expect(
                try await a.markDelivered(id: "z", status: 200, attempts: 1, at: .now(), awaitingNotification: false)
            )
            // b removed within the interval: a's turn has not come.
            #expect(try await a.removeFinished(before: later.advanced(by: .seconds(1))) == 0)
            #expect(try await a.status(id: "z")?.state == .delivered)
            #expect(try await a.status(id: "x") == nil)
            #expect(try await a.status(id: "kept")?.state == .pending)
        }
    }

    @Test("with PostgreSQL stopped, operations fail within their timeout; once it is back, nothing was lost")
    func databaseDownAndBack() async throws {
        // A server of its own: the suites sharing the process's keep theirs running. (Should the test throw, the
        // server's deinit stops it.)
        let server = try await PostgresTestServer.start()
        let url = try await server.makeDatabase()
        let a = store("a", url, operationTimeout: .seconds(3))
        try await closing([a]) {
            try await a.insert(entry("before"))
            try await server.stop()
            let started = ContinuousClock.now
            let refusal = await #expect(throws: QueueStoreError.self) { try await a.insert(entry("during")) }
            #expect(refusal?.message.hasPrefix("the queue's database") == true, "\(String(describing: refusal))")
            #expect(refusal?.message.contains(url.password ?? "-") == false)
            await #expect(throws: (any Error).self) { _ = try await a.claimHead(route: "POST /api", at: .now()) }
            #expect(ContinuousClock.now - started < .seconds(15))
            try await server.start()
            var head: QueueHeadClaim = .empty
            for _ in 0..<50 {
                if let claim = try? await a.claimHead(route: "POST /api", at: .now()) {
                    head = claim
                    break
                }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(claimedID(head) == "before")
            try await a.insert(entry("after"))
            #expect(try await a.pendingCount() == 2)
        }
        await server.shutdown()
    }
}
