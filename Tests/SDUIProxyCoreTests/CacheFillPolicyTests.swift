import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

/// The cache fill's decisions, case by case: stale-if-error, the `Authorization` rule, storing, and what a
/// coalesced waiter does with its leader's outcome.
@Suite struct CacheFillPolicyTests {
    /// The stale entry a fill replaces: none, or one stored `lifetime` seconds of freshness ago and now
    /// `staleness` seconds past it.
    enum Stale: Sendable, CustomTestStringConvertible {
        case none
        /// `staleness` seconds stale, under the route's `stale-if-error` of `routeWindow` seconds and the
        /// entry's own `Cache-Control`.
        case entry(staleness: Int64, routeWindow: Int64, cacheControl: String? = nil)

        var testDescription: String {
            switch self {
            case .none: "no stale entry"
            case .entry(let staleness, let window, let cacheControl):
                "\(staleness)s stale, route window \(window)s" + (cacheControl.map { ", \($0)" } ?? "")
            }
        }
    }

    private static let storedAt = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
    private static let lifetime: Int64 = 10

    private static func entry(
        status: HTTPResponseStatus = .ok,
        cacheControl: String? = nil,
        routeWindow: Int64 = 0,
        varyNames: [String] = [],
        variant: String = ""
    ) -> CachedResponse {
        var headers: HTTPHeaders = ["Content-Type": "application/json"]
        if let cacheControl { headers.add(name: "Cache-Control", value: cacheControl) }
        var metadata = CachedResponse.Metadata(storedAt: storedAt, initialAge: 0, freshnessLifetime: lifetime)
        metadata.configuredStaleIfError = routeWindow
        metadata.varyNames = varyNames
        metadata.variant = variant
        return CachedResponse(status: status, headers: headers, body: ByteBuffer(string: "{}"), metadata: metadata)
    }

    /// The policy for a fill replacing `stale`, and the time that makes it as stale as described.
    private static func policy(
        replacing stale: Stale,
        requestHeaders: HTTPHeaders = [:],
        defaultTTL: Int64 = 0,
        rules: StorageRules = StorageRules()
    ) -> (CacheFillPolicy, now: NIODeadline) {
        switch stale {
        case .none:
            return (
                CacheFillPolicy(requestHeaders: requestHeaders, defaultTTL: defaultTTL, staleEntry: nil, rules: rules),
                storedAt + .seconds(lifetime + 1)
            )
        case .entry(let staleness, let window, let cacheControl):
            return (
                CacheFillPolicy(
                    requestHeaders: requestHeaders,
                    defaultTTL: defaultTTL,
                    staleEntry: entry(cacheControl: cacheControl, routeWindow: window),
                    rules: rules
                ),
                storedAt + .seconds(lifetime + staleness)
            )
        }
    }

    // MARK: Stale-if-error

    struct StandInCase: Sendable, CustomTestStringConvertible {
        var failure: CacheFillPolicy.Failure
        var stale: Stale
        var expected: String?
        var testDescription: String { "\(failure) with \(stale.testDescription)" }
    }

    @Test(
        "a stale entry stands in for an error or a 5xx within its stale-if-error window, and for nothing else",
        arguments: [
            StandInCase(
                failure: .error("timeout: slow"),
                stale: .entry(staleness: 30, routeWindow: 60),
                expected: "timeout: slow"
            ),
            StandInCase(
                failure: .error("network: refused"),
                stale: .entry(staleness: 0, routeWindow: 60),
                expected: "network: refused"
            ),
            // The window's last second still counts; the next one does not.
            StandInCase(
                failure: .error("timeout: slow"),
                stale: .entry(staleness: 60, routeWindow: 60),
                expected: "timeout: slow"
            ),
            StandInCase(failure: .error("timeout: slow"), stale: .entry(staleness: 61, routeWindow: 60), expected: nil),
            StandInCase(failure: .error("timeout: slow"), stale: .entry(staleness: 1, routeWindow: 0), expected: nil),
            StandInCase(failure: .error("timeout: slow"), stale: .none, expected: nil),
            StandInCase(
                failure: .status(500),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: "backend status 500"
            ),
            StandInCase(
                failure: .status(503),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: "backend status 503"
            ),
            StandInCase(
                failure: .status(599),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: "backend status 599"
            ),
            StandInCase(failure: .status(503), stale: .entry(staleness: 61, routeWindow: 60), expected: nil),
            StandInCase(failure: .status(503), stale: .none, expected: nil),
            // Not a failure of the backend: its answer is decided on its own.
            StandInCase(failure: .status(200), stale: .entry(staleness: 1, routeWindow: 60), expected: nil),
            StandInCase(failure: .status(304), stale: .entry(staleness: 1, routeWindow: 60), expected: nil),
            StandInCase(failure: .status(404), stale: .entry(staleness: 1, routeWindow: 60), expected: nil),
            StandInCase(failure: .status(499), stale: .entry(staleness: 1, routeWindow: 60), expected: nil),
            // The entry's own stale-if-error wins over the route's.
            StandInCase(
                failure: .error("e"),
                stale: .entry(staleness: 100, routeWindow: 0, cacheControl: "max-age=10, stale-if-error=120"),
                expected: "e"
            ),
            StandInCase(
                failure: .error("e"),
                stale: .entry(staleness: 30, routeWindow: 60, cacheControl: "max-age=10, stale-if-error=20"),
                expected: nil
            ),
            // must-revalidate and no-cache forbid serving stale; s-maxage turns the route's window off.
            StandInCase(
                failure: .status(502),
                stale: .entry(staleness: 1, routeWindow: 60, cacheControl: "max-age=10, must-revalidate"),
                expected: nil
            ),
            StandInCase(
                failure: .status(502),
                stale: .entry(staleness: 1, routeWindow: 60, cacheControl: "s-maxage=10"),
                expected: nil
            ),
        ]
    )
    func staleStandsIn(_ test: StandInCase) {
        let (policy, now) = Self.policy(replacing: test.stale)
        #expect(policy.staleStandIn(after: test.failure, at: now) == test.expected)
    }

    @Test(
        "a failure's reason is what is logged and reported",
        arguments: [
            (CacheFillPolicy.Failure.error("timeout: slow"), "timeout: slow", true),
            (.status(502), "backend status 502", true),
            (.status(500), "backend status 500", true),
            (.status(404), "backend status 404", false),
        ]
    )
    func failureReasons(failure: CacheFillPolicy.Failure, reason: String, isFailure: Bool) {
        #expect(failure.reason == reason)
        #expect(failure.isFailure == isFailure)
    }

    // MARK: Authorization (RFC 9111 section 3.5)

    @Test(
        "a response to a request with Authorization is shared only when it says public, s-maxage or must-revalidate",
        arguments: [
            (false, "", true),
            (false, "max-age=60", true),
            (false, "no-cache", true),
            (true, "", false),
            (true, "max-age=60", false),
            (true, "no-cache", false),
            (true, "proxy-revalidate, max-age=60", false),
            (true, "public", true),
            (true, "public, max-age=60", true),
            (true, "s-maxage=60", true),
            (true, "s-maxage=0", true),
            (true, "must-revalidate", true),
            (true, "MUST-REVALIDATE, max-age=5", true),
        ]
    )
    func authorizationRule(hasAuthorization: Bool, cacheControl: String, shared: Bool) {
        let directives = CacheControl(headers: ["Cache-Control": cacheControl])
        #expect(
            CacheFillPolicy.authorizationPermitsSharing(
                requestHasAuthorization: hasAuthorization,
                directives: directives
            )
                == shared
        )
    }

    @Test(
        "a request with Authorization neither leads nor joins a coalesced exchange, nor is answered from the cache",
        arguments: [
            ([:], true),
            (["Authorization": "Bearer a"], false),
            (["authorization": ""], false),
            (["AUTHORIZATION": "Basic x"], false),
            (["Proxy-Authorization": "Basic x"], true),
            (["Cookie": "session=1"], true),
        ] as [(HTTPHeaders, Bool)]
    )
    func coalescing(headers: HTTPHeaders, mayCoalesce: Bool) {
        #expect(CacheFillPolicy.mayCoalesce(requestHeaders: headers) == mayCoalesce)
        // The same credentials keep a request from being answered from what is stored.
        #expect(CacheFillPolicy.mayAnswerFromCache(requestHeaders: headers) == mayCoalesce)
    }

    @Test(
        "a streamed answer is shared only by requests that ask for the same one: no credentials, range or condition",
        arguments: [
            ([:], true),
            (["Accept": "application/json", "Cookie": "session=1"], true),
            (["Authorization": "Bearer a"], false),
            (["Range": "bytes=0-99"], false),
            (["If-Range": "\"v1\""], false),
            (["If-None-Match": "\"v1\""], false),
            (["if-modified-since": "Thu, 01 Jan 2026 00:00:00 GMT"], false),
            (["If-Match": "*"], false),
            (["If-Unmodified-Since": "Thu, 01 Jan 2026 00:00:00 GMT"], false),
            (["beagle-hash": "abc"], false),
        ] as [(HTTPHeaders, Bool)]
    )
    func sharingAStream(headers: HTTPHeaders, mayShare: Bool) {
        #expect(CacheFillPolicy.mayShareStream(requestHeaders: headers) == mayShare)
    }

    @Test("requests share a stream when they reach the backend the same but for who sent them")
    func streamSharingIdentity() {
        func identity(_ headers: HTTPHeaders) -> String {
            CacheFillPolicy.streamSharingIdentity(upstreamFields: HTTPFieldLines(headers))
        }
        let base: HTTPHeaders = ["Host": "a.example", "Accept-Encoding": "identity", "Cookie": "u=1"]
        var otherClient = base
        otherClient.add(name: "X-Forwarded-For", value: "10.0.0.2")
        otherClient.add(name: "Forwarded", value: "for=10.0.0.2")
        otherClient.add(name: "X-Real-IP", value: "10.0.0.2")
        #expect(identity(base) == identity(otherClient))
        for (name, value) in [("Cookie", "u=2"), ("Accept-Encoding", "gzip"), ("Host", "b.example")] {
            var different = base
            different.replaceOrAdd(name: name, value: value)
            #expect(identity(different) != identity(base), "\(name)")
        }
    }

    @Test(
        "an answer meant for the first client of a shared stream alone is not shared",
        arguments: [
            (200, [:], true),
            (404, ["Cache-Control": "no-store"], true),
            (200, ["Vary": "Accept-Encoding"], true),
            (200, ["Set-Cookie": "session=1"], false),
            (200, ["Cache-Control": "max-age=60, private"], false),
            (200, ["Vary": "Accept, *"], false),
            (401, [:], false),
            (403, [:], false),
            (407, [:], false),
        ] as [(Int, HTTPHeaders, Bool)]
    )
    func sharingAStreamedAnswer(status: Int, headers: HTTPHeaders, shared: Bool) {
        #expect(
            CacheFillPolicy.mayShareStreamedResponse(status: HTTPResponseStatus(statusCode: status), headers: headers)
                == shared
        )
    }

    // MARK: Storing

    struct StoreCase: Sendable, CustomTestStringConvertible {
        var name: String
        var requestHeaders: HTTPHeaders = [:]
        var status: HTTPResponseStatus = .ok
        var responseHeaders: HTTPHeaders
        var defaultTTL: Int64 = 0
        var hasStaleEntry = true
        var storesSetCookie = true
        var expected: CacheFillPolicy.StoreDecision
        var testDescription: String { name }
    }

    @Test(
        "answers are stored or not, and an answer no client may be served takes the stale entry with it",
        arguments: [
            StoreCase(
                name: "max-age",
                responseHeaders: ["Cache-Control": "max-age=60"],
                expected: .store(lifetime: 60)
            ),
            StoreCase(
                name: "s-maxage over max-age",
                responseHeaders: ["Cache-Control": "max-age=5, s-maxage=60"],
                expected: .store(lifetime: 60)
            ),
            StoreCase(
                name: "the route's default",
                responseHeaders: [:],
                defaultTTL: 30,
                expected: .store(lifetime: 30)
            ),
            StoreCase(
                name: "no-cache with a validator",
                responseHeaders: ["Cache-Control": "no-cache", "ETag": "\"v1\""],
                expected: .store(lifetime: 0)
            ),
            StoreCase(
                name: "no freshness",
                responseHeaders: [:],
                expected: .doNotStore(reason: "no freshness information", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "no freshness, no stale entry",
                responseHeaders: [:],
                hasStaleEntry: false,
                expected: .doNotStore(reason: "no freshness information", dropsStaleEntry: false)
            ),
            StoreCase(
                name: "response no-store",
                responseHeaders: ["Cache-Control": "no-store"],
                expected: .doNotStore(reason: "no-store", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "private",
                responseHeaders: ["Cache-Control": "private, max-age=60"],
                expected: .doNotStore(reason: "private", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "set-cookie",
                responseHeaders: ["Cache-Control": "max-age=60", "Set-Cookie": "a=1"],
                expected: .store(lifetime: 60)
            ),
            StoreCase(
                name: "set-cookie with storeSetCookie false",
                responseHeaders: ["Cache-Control": "max-age=60", "Set-Cookie": "a=1"],
                storesSetCookie: false,
                expected: .doNotStore(reason: "set-cookie", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "vary *",
                responseHeaders: ["Cache-Control": "max-age=60", "Vary": "*"],
                expected: .doNotStore(reason: "vary *", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "a server error with explicit freshness",
                status: .serviceUnavailable,
                responseHeaders: ["Cache-Control": "max-age=60"],
                expected: .store(lifetime: 60)
            ),
            StoreCase(
                name: "a partial response",
                status: .partialContent,
                responseHeaders: ["Cache-Control": "max-age=60"],
                expected: .doNotStore(reason: "status 206", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "a cacheable error status",
                status: .notFound,
                responseHeaders: ["Cache-Control": "max-age=60"],
                expected: .store(lifetime: 60)
            ),
            // What only this request kept out leaves the entry other clients are served.
            StoreCase(
                name: "request no-store",
                requestHeaders: ["Cache-Control": "no-store"],
                responseHeaders: ["Cache-Control": "max-age=60"],
                expected: .doNotStore(reason: "request no-store", dropsStaleEntry: false)
            ),
            StoreCase(
                name: "Authorization",
                requestHeaders: ["Authorization": "Bearer a"],
                responseHeaders: ["Cache-Control": "max-age=60"],
                expected: .doNotStore(reason: "authorization", dropsStaleEntry: false)
            ),
            StoreCase(
                name: "Authorization, public",
                requestHeaders: ["Authorization": "Bearer a"],
                responseHeaders: ["Cache-Control": "public, max-age=60"],
                expected: .store(lifetime: 60)
            ),
            StoreCase(
                name: "Authorization, s-maxage",
                requestHeaders: ["Authorization": "Bearer a"],
                responseHeaders: ["Cache-Control": "s-maxage=20"],
                expected: .store(lifetime: 20)
            ),
            StoreCase(
                name: "Authorization, must-revalidate",
                requestHeaders: ["Authorization": "Bearer a"],
                responseHeaders: ["Cache-Control": "must-revalidate, max-age=60"],
                expected: .store(lifetime: 60)
            ),
            // Unstorable for anyone: the request's own reason is reported, and the entry still goes.
            StoreCase(
                name: "Authorization and an answer no one may be served",
                requestHeaders: ["Authorization": "Bearer a"],
                status: .badGateway,
                responseHeaders: [:],
                expected: .doNotStore(reason: "authorization", dropsStaleEntry: true)
            ),
            StoreCase(
                name: "request no-store and response no-store",
                requestHeaders: ["Cache-Control": "no-store"],
                responseHeaders: ["Cache-Control": "no-store"],
                expected: .doNotStore(reason: "no-store", dropsStaleEntry: true)
            ),
        ]
    )
    func storing(_ test: StoreCase) {
        let stale: Stale = test.hasStaleEntry ? .entry(staleness: 1, routeWindow: 0) : .none
        var rules = StorageRules()
        rules.storesSetCookie = test.storesSetCookie
        let (policy, _) = Self.policy(
            replacing: stale,
            requestHeaders: test.requestHeaders,
            defaultTTL: test.defaultTTL,
            rules: rules
        )
        let fields = HTTPFieldLines(test.responseHeaders)
        #expect(policy.storeDecision(status: test.status, fields: fields) == test.expected)
        // Directives the caller parsed already decide the same.
        let directives = CacheControl(fields: fields)
        #expect(policy.storeDecision(status: test.status, fields: fields, directives: directives) == test.expected)
    }

    @Test(
        "a revalidated entry is stored again, or goes when the 304 made it unstorable for everyone",
        arguments: [
            ([:], "max-age=60", CacheFillPolicy.StoreDecision.store(lifetime: 60)),
            ([:], "no-store", .doNotStore(reason: "revalidated, no longer storable", dropsStaleEntry: true)),
            ([:], "private", .doNotStore(reason: "revalidated, no longer storable", dropsStaleEntry: true)),
            (
                ["Authorization": "Bearer a"], "max-age=60",
                .doNotStore(reason: "revalidated, no longer storable", dropsStaleEntry: false)
            ),
            (["Authorization": "Bearer a"], "public, max-age=60", .store(lifetime: 60)),
        ] as [(HTTPHeaders, String, CacheFillPolicy.StoreDecision)]
    )
    func revalidating(requestHeaders: HTTPHeaders, cacheControl: String, expected: CacheFillPolicy.StoreDecision) {
        let (policy, _) = Self.policy(replacing: .entry(staleness: 1, routeWindow: 0), requestHeaders: requestHeaders)
        let merged = HTTPFieldLines(["Content-Type": "application/json", "Cache-Control": cacheControl])
        #expect(policy.revalidatedDecision(status: .ok, mergedFields: merged) == expected)
    }

    // MARK: The backend's answer

    @Test(
        "a 304 refreshes the stale entry, a 5xx within its window is met with it, and the rest is decided",
        arguments: [
            (Stale.none, 304, CacheFillPolicy.AnswerStep.decide),
            (.none, 503, .decide),
            (.none, 200, .decide),
            (.entry(staleness: 1, routeWindow: 60), 304, .revalidate),
            // A 304 is the backend's confirmation, whatever the window.
            (.entry(staleness: 500, routeWindow: 0), 304, .revalidate),
            (.entry(staleness: 1, routeWindow: 60), 503, .standIn(because: "backend status 503")),
            (.entry(staleness: 1, routeWindow: 60), 501, .standIn(because: "backend status 501")),
            (.entry(staleness: 61, routeWindow: 60), 503, .decide),
            (.entry(staleness: 1, routeWindow: 0), 500, .decide),
            (.entry(staleness: 1, routeWindow: 60), 200, .decide),
            (.entry(staleness: 1, routeWindow: 60), 404, .decide),
        ] as [(Stale, Int, CacheFillPolicy.AnswerStep)]
    )
    func firstStep(stale: Stale, status: Int, expected: CacheFillPolicy.AnswerStep) {
        let (policy, now) = Self.policy(replacing: stale)
        #expect(policy.firstStep(for: HTTPResponseStatus(statusCode: status), at: now) == expected)
    }

    @Test(
        "a success in JSON is validated as a component, on routes that validate",
        arguments: [
            (200, "application/json", true, true),
            (200, "application/json; charset=utf-8", true, true),
            (200, "application/vnd.screen+json", true, true),
            (204, "application/json", true, true),
            (200, "application/json", false, false),
            (200, "text/html", true, false),
            (200, nil, true, false),
            (301, "application/json", true, false),
            (404, "application/json", true, false),
            (503, "application/json", true, false),
        ] as [(Int, String?, Bool, Bool)]
    )
    func validation(status: Int, contentType: String?, routeValidates: Bool, validates: Bool) {
        var headers = HTTPHeaders()
        if let contentType { headers.add(name: "Content-Type", value: contentType) }
        #expect(
            CacheFillPolicy.validatesBody(
                status: HTTPResponseStatus(statusCode: status),
                fields: HTTPFieldLines(headers),
                routeValidatesComponents: routeValidates
            ) == validates
        )
    }

    // MARK: Coalesced waiters

    /// A leader's outcome, described.
    enum Leader: Sendable, CustomStringConvertible {
        case stored(variant: String?)
        /// An error the leader stored: it said how long to keep it.
        case storedError(status: Int)
        case servedStale(variant: String?, because: String)
        case notStored(status: Int, headers: HTTPHeaders = [:])

        var outcome: CacheFillPolicy.LeaderOutcome {
            func entry(_ variant: String?) -> CachedResponse {
                variant.map { CacheFillPolicyTests.entry(varyNames: ["accept-language"], variant: $0) }
                    ?? CacheFillPolicyTests.entry()
            }
            switch self {
            case .stored(let variant): return .entry(entry(variant))
            case .storedError(let status):
                return .entry(CacheFillPolicyTests.entry(status: HTTPResponseStatus(statusCode: status)))
            case .servedStale(let variant, let reason): return .servedStale(entry(variant), because: reason)
            case .notStored(let status, let headers):
                return .notStored(status: HTTPResponseStatus(statusCode: status), fields: HTTPFieldLines(headers))
            }
        }

        var description: String {
            switch self {
            case .stored(let variant): "stored \(variant ?? "without variants")"
            case .storedError(let status): "stored error \(status)"
            case .servedStale(let variant, let reason): "served stale \(variant ?? "without variants") (\(reason))"
            case .notStored(let status, let headers): "not stored \(status) \(headers)"
            }
        }
    }

    struct WaiterCase: Sendable, CustomTestStringConvertible {
        var leader: Leader
        var stale: Stale = .none
        var language = "en"
        var expected: CacheFillPolicy.WaiterStep
        var testDescription: String { "\(leader), waiter \(language) with \(stale.testDescription)" }
    }

    @Test(
        "a waiter takes what every client could have been given, and meets a failure with its own stale entry",
        arguments: [
            WaiterCase(leader: .stored(variant: nil), expected: .take),
            WaiterCase(leader: .stored(variant: "en"), expected: .take),
            WaiterCase(leader: .stored(variant: "fr"), expected: .fetchAlone),
            WaiterCase(leader: .stored(variant: nil), stale: .entry(staleness: 1, routeWindow: 60), expected: .take),
            // The backend failed the leader: the waiter's own stale entry, else the shareable error.
            WaiterCase(
                leader: .notStored(status: 503),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: .standIn(because: "backend status 503")
            ),
            WaiterCase(leader: .notStored(status: 503), expected: .take),
            // A stored server error is the backend failing all the same: the waiter's stale success wins.
            WaiterCase(
                leader: .storedError(status: 503),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: .standIn(because: "backend status 503")
            ),
            WaiterCase(leader: .storedError(status: 503), expected: .take),
            WaiterCase(
                leader: .storedError(status: 404),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: .take
            ),
            WaiterCase(leader: .notStored(status: 500), stale: .entry(staleness: 61, routeWindow: 60), expected: .take),
            WaiterCase(leader: .notStored(status: 503, headers: ["Cache-Control": "private"]), expected: .fetchAlone),
            WaiterCase(
                leader: .servedStale(variant: "fr", because: "timeout: slow"),
                stale: .entry(staleness: 1, routeWindow: 60),
                expected: .standIn(because: "timeout: slow")
            ),
            WaiterCase(leader: .servedStale(variant: "en", because: "timeout: slow"), expected: .take),
            WaiterCase(leader: .servedStale(variant: "fr", because: "timeout: slow"), expected: .fetchAlone),
            WaiterCase(leader: .servedStale(variant: nil, because: "backend status 502"), expected: .take),
            // Answers that are not failures of the backend, nor for everyone.
            WaiterCase(leader: .notStored(status: 404), expected: .take),
            WaiterCase(leader: .notStored(status: 404), stale: .entry(staleness: 1, routeWindow: 60), expected: .take),
            WaiterCase(leader: .notStored(status: 404, headers: ["Set-Cookie": "a=1"]), expected: .fetchAlone),
            WaiterCase(leader: .notStored(status: 401), expected: .fetchAlone),
            WaiterCase(leader: .notStored(status: 403), expected: .fetchAlone),
            WaiterCase(leader: .notStored(status: 407), expected: .fetchAlone),
            WaiterCase(leader: .notStored(status: 200), expected: .fetchAlone),
            WaiterCase(leader: .notStored(status: 304), expected: .fetchAlone),
        ]
    )
    func waiters(_ test: WaiterCase) {
        let (policy, now) = Self.policy(replacing: test.stale, requestHeaders: ["Accept-Language": test.language])
        #expect(policy.waiterStep(after: test.leader.outcome, at: now) == test.expected)
    }

    @Test("a stored error never stands in for a failed refresh, whatever its stale-if-error window")
    func errorsDoNotStandIn() {
        let now = Self.storedAt + .seconds(Self.lifetime + 1)
        for status in [404, 500, 503] as [Int] {
            let stale = Self.entry(status: HTTPResponseStatus(statusCode: status), routeWindow: 600)
            let policy = CacheFillPolicy(requestHeaders: [:], defaultTTL: 0, staleEntry: stale, rules: StorageRules())
            #expect(policy.staleStandIn(after: .status(502), at: now) == nil, "\(status)")
            #expect(policy.firstStep(for: .badGateway, at: now) == .decide, "\(status)")
        }
        let success = CacheFillPolicy(
            requestHeaders: [:],
            defaultTTL: 0,
            staleEntry: Self.entry(routeWindow: 600),
            rules: StorageRules()
        )
        #expect(success.staleStandIn(after: .status(502), at: now) == "backend status 502")
    }
}
