import Foundation
import NIOCore
import SDUIProxyCore
import Testing

private typealias Skipped = PrefetchPlanner.Skipped

private func json(_ text: String) throws -> JSONValue {
    try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
}

extension PrefetchPlanner {
    /// The plan for a component given as a value, sent as JSON text with its keys sorted (so members appear in
    /// the order of their keys).
    fileprivate func plan(for component: JSONValue) -> Plan {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return plan(forComponent: ByteBuffer(bytes: try! encoder.encode(component)))
    }

    /// The plan for a component file as it is, its members in the file's order.
    fileprivate func plan(forFile data: Data) -> Plan {
        plan(forComponent: ByteBuffer(bytes: data))
    }
}

private func makePlanner(_ upstream: String, allowedHosts: [String] = []) throws -> PrefetchPlanner {
    PrefetchPlanner(upstream: try UpstreamOrigin(parsing: upstream), allowedHosts: allowedHosts)
}

/// A navigation action as a JSON value.
private func action(
    _ name: String = "beagle:pushView",
    url: JSONValue,
    shouldPrefetch: JSONValue? = .bool(true)
) -> JSONValue {
    var route: [String: JSONValue] = ["url": url]
    if let shouldPrefetch { route["shouldPrefetch"] = shouldPrefetch }
    return .object(["_beagleAction_": .string(name), "route": .object(route)])
}

private func action(_ name: String = "beagle:pushView", url: String) -> JSONValue {
    action(name, url: .string(url))
}

/// `value` with every `route.shouldPrefetch` it contains set to true: what the fixtures would say if their
/// authors had asked for prefetching.
private func askingForPrefetch(_ value: JSONValue) -> JSONValue {
    switch value {
    case .object(var members):
        for (key, member) in members { members[key] = askingForPrefetch(member) }
        if case .object(var route)? = members["route"], route["shouldPrefetch"] != nil {
            route["shouldPrefetch"] = .bool(true)
            members["route"] = .object(route)
        }
        return .object(members)
    case .array(let elements):
        return .array(elements.map(askingForPrefetch))
    default:
        return value
    }
}

/// `value` wrapped in `levels` arrays, so that it sits at nesting level `levels`.
private func nested(_ value: JSONValue, levels: Int) -> JSONValue {
    var result = value
    for _ in 0..<levels { result = .array([result]) }
    return result
}

// MARK: - The Beagle fixtures

@Suite("PrefetchPlanner on the Beagle fixtures")
struct PrefetchPlannerFixtureTests {
    /// The fixtures' own absolute URLs point at `http://localhost:8080`, so that is the upstream here.
    let localBackend: PrefetchPlanner

    init() throws {
        localBackend = try makePlanner("http://localhost:8080")
    }

    /// The fixtures with a route that asks for prefetching; each has its own test below.
    static let planning: Set<String> = [
        "welcome-screen.json", "catalog-list.json", "push-view-custom-scheme.json", "reset-stack-expression.json",
    ]

    /// The fixtures whose navigation routes all say `"shouldPrefetch": false`.
    static let prefetchFalse = [
        "account-screen.json", "actions-list.json", "condition.json", "push-stack-remote-route.json",
        "push-stack-with-context.json", "push-view-login-post.json", "sign-up-form.json", "touchable-details.json",
    ]

    @Test("the fixtures named by these tests are all in the fixture list")
    func namesAreListed() {
        let listed = Set(Fixtures.beagleNames)
        #expect(Self.planning.isSubset(of: listed))
        #expect(Set(Self.prefetchFalse).isSubset(of: listed))
        #expect(Self.planning.isDisjoint(with: Self.prefetchFalse))
    }

    @Test(
        "welcome-screen.json: literal routes on the upstream are targets; an expression and another host are skipped"
    )
    func welcomeScreen() throws {
        let plan = localBackend.plan(forFile: try Fixtures.data("welcome-screen.json"))
        #expect(plan.targets == ["/screens/profile", "/screens/catalog?sort=price"])
        #expect(
            plan.skipped == [
                Skipped(url: "/screens/@{session.homeScreen}", reason: .expression),
                Skipped(url: "https://partner.example.org/offers", reason: .foreignHost("partner.example.org")),
            ]
        )
        #expect(!plan.truncated)
        // Against another backend the absolute URL on localhost:8080 is another host; the relative one still counts.
        let elsewhere = try makePlanner("http://backend:8081/bff").plan(
            forFile: try Fixtures.data("welcome-screen.json")
        )
        #expect(elsewhere.targets == ["/screens/profile"])
        #expect(
            elsewhere.skipped.contains(
                Skipped(url: "http://localhost:8080/screens/catalog?sort=price", reason: .foreignHost("localhost:8080"))
            )
        )
    }

    @Test("catalog-list.json: a list template's route is an expression, the footer's a target")
    func catalogList() throws {
        let plan = localBackend.plan(forFile: try Fixtures.data("catalog-list.json"))
        #expect(plan.targets == ["/screens/cart"])
        #expect(plan.skipped == [Skipped(url: "/products/@{product.sku}", reason: .expression)])
        #expect(!plan.truncated)
    }

    @Test("push-view-custom-scheme.json asks to prefetch app://orders/latest, which is not an http(s) URL: skipped")
    func pushViewCustomScheme() throws {
        let plan = localBackend.plan(forFile: try Fixtures.data("push-view-custom-scheme.json"))
        #expect(plan.targets.isEmpty)
        #expect(plan.skipped == [Skipped(url: "app://orders/latest", reason: .unsupportedURL)])
        #expect(!plan.truncated)
    }

    @Test("reset-stack-expression.json asks to prefetch a path with an expression in the middle: skipped")
    func resetStackExpression() throws {
        let plan = localBackend.plan(forFile: try Fixtures.data("reset-stack-expression.json"))
        #expect(plan.targets.isEmpty)
        #expect(plan.skipped == [Skipped(url: "/orders/@{order.id}/tracking", reason: .expression)])
    }

    @Test(
        "no other fixture has a route that asks for prefetching, so its plan is empty",
        arguments: Fixtures.beagleNames.filter { !planning.contains($0) }
    )
    func fixturesWithoutPrefetch(_ name: String) throws {
        let plan = localBackend.plan(forFile: try Fixtures.data(name))
        #expect(plan == PrefetchPlanner.Plan())
    }

    @Test(
        "navigation actions with shouldPrefetch false are not collected, not even as skipped; true would plan them",
        arguments: prefetchFalse
    )
    func shouldPrefetchFalse(_ name: String) throws {
        let text = String(decoding: try Fixtures.data(name), as: UTF8.self)
        #expect(text.contains("\"shouldPrefetch\": false"))
        #expect(localBackend.plan(forFile: try Fixtures.data(name)) == PrefetchPlanner.Plan())
        let asking = localBackend.plan(for: askingForPrefetch(try Fixtures.json(name)))
        #expect(asking.targets.count + asking.skipped.count == 1)
    }

    @Test(
        "pushStack fixtures asking for prefetch: their URL is an expression the device resolves",
        arguments: [
            ("push-stack-remote-route.json", "@{checkout.nextStep}"),
            ("push-stack-with-context.json", "@{global.routes.coupons}"),
        ]
    )
    func pushStackExpression(_ name: String, _ url: String) throws {
        let plan = localBackend.plan(for: askingForPrefetch(try Fixtures.json(name)))
        #expect(plan.targets.isEmpty)
        #expect(plan.skipped == [Skipped(url: url, reason: .expression)])
    }

    @Test("push-view-login-post.json asking for prefetch: its route is a POST with a body, not a plain GET")
    func additionalDataPOST() throws {
        let plan = localBackend.plan(for: askingForPrefetch(try Fixtures.json("push-view-login-post.json")))
        #expect(plan.targets.isEmpty)
        #expect(plan.skipped == [Skipped(url: "http://localhost:8080/session/login", reason: .notPlainGET)])
    }

    @Test("account-screen.json asking for prefetch: its navigation-bar item's pushView resolves against the upstream")
    func screenNavigationBarItem() throws {
        let screen = askingForPrefetch(try Fixtures.json("account-screen.json"))
        let url = "http://localhost:8080/account/settings"

        #expect(localBackend.plan(for: screen).targets == ["/account/settings"])
        #expect(try makePlanner("http://localhost:8080/account").plan(for: screen).targets == ["/settings"])
        #expect(
            try makePlanner("http://localhost:8080/bff").plan(for: screen).skipped
                == [Skipped(url: url, reason: .outsideBasePath)]
        )
        #expect(
            try makePlanner("http://backend:8081").plan(for: screen).skipped
                == [Skipped(url: url, reason: .foreignHost("localhost:8080"))]
        )
        #expect(
            try makePlanner("http://backend:8081", allowedHosts: ["LocalHost:8080"]).plan(for: screen).targets
                == ["/account/settings"]
        )
        #expect(
            try makePlanner("http://backend:8081", allowedHosts: ["localhost:9999"]).plan(for: screen).skipped
                == [Skipped(url: url, reason: .foreignHost("localhost:8080"))]
        )
        #expect(
            try makePlanner("file:config/samples", allowedHosts: ["localhost"]).plan(for: screen).targets
                == ["/account/settings"]
        )
    }

    @Test(
        "openNativeRoute is not a navigation to a screen: never collected, whatever its route says",
        arguments: ["open-native-route.json", "open-native-route-deeplink.json"]
    )
    func openNativeRoute(_ name: String) throws {
        guard case .object(var members) = try Fixtures.json(name) else {
            Issue.record("\(name) is not an object")
            return
        }
        #expect(members["_beagleAction_"]?.stringValue?.lowercased() == "beagle:opennativeroute")
        members["route"] = .object(["url": .string("/screens/native"), "shouldPrefetch": .bool(true)])
        #expect(localBackend.plan(for: .object(members)) == PrefetchPlanner.Plan())
        // The same route under pushView is a target: it is the action's name that keeps it out.
        members["_beagleAction_"] = .string("beagle:pushView")
        #expect(localBackend.plan(for: .object(members)).targets == ["/screens/native"])
    }
}

// MARK: - The bundled sample screens

@Suite("PrefetchPlanner on the sample screens")
struct PrefetchPlannerSampleTests {
    let demo: PrefetchPlanner

    init() throws {
        demo = try makePlanner("file:config/samples")
    }

    @Test("home.json: two prefetchable routes, and the orders route is skipped for its expression")
    func home() throws {
        let plan = demo.plan(forFile: try Fixtures.sampleScreenData("home.json"))
        #expect(plan.targets == ["/screens/products", "/screens/products/2"])
        #expect(plan.skipped == [Skipped(url: "/screens/orders/@{user.id}", reason: .expression)])
        #expect(!plan.truncated)
    }

    @Test("products.json: its only route has shouldPrefetch false (and an expression)")
    func products() throws {
        #expect(demo.plan(forFile: try Fixtures.sampleScreenData("products.json")) == PrefetchPlanner.Plan())
    }

    @Test("each product screen's resetStack leads back home", arguments: [1, 2, 3])
    func product(_ number: Int) throws {
        let plan = demo.plan(forFile: try Fixtures.sampleScreenData("products/\(number).json"))
        #expect(plan.targets == ["/screens/home"])
        #expect(plan.skipped.isEmpty)
    }

    @Test("relative routes resolve the same against an HTTP backend with a base path")
    func httpBackend() throws {
        let plan = try makePlanner("http://backend:8081/bff").plan(forFile: try Fixtures.sampleScreenData("home.json"))
        #expect(plan.targets == ["/screens/products", "/screens/products/2"])
    }

    @Test("every target the samples plan is a screen the sample directory holds")
    func targetsExist() throws {
        var targets: Set<String> = []
        for name in ["home.json", "products.json", "products/1.json", "products/2.json", "products/3.json"] {
            targets.formUnion(demo.plan(forFile: try Fixtures.sampleScreenData(name)).targets)
        }
        #expect(targets == ["/screens/home", "/screens/products", "/screens/products/2"])
        let samples = Fixtures.repositoryRoot.appendingPathComponent("config/samples")
        for target in targets {
            let file = samples.appendingPathComponent(String(target.dropFirst()) + ".json")
            #expect(FileManager.default.fileExists(atPath: file.path), "\(target) has no sample file")
        }
    }
}

// MARK: - Collecting actions

@Suite("PrefetchPlanner: which actions count")
struct PrefetchPlannerCollectionTests {
    let planner: PrefetchPlanner

    init() throws {
        planner = try makePlanner("http://backend:8081")
    }

    @Test("the four navigation actions count, in any letter case")
    func navigationActionNames() {
        let component = JSONValue.array([
            action("BEAGLE:PUSHVIEW", url: "/a"),
            action("beagle:PushStack", url: "/b"),
            action("Beagle:resetstack", url: "/c"),
            action("beagle:resetApplication", url: "/d"),
        ])
        #expect(planner.plan(for: component).targets == ["/a", "/b", "/c", "/d"])
    }

    @Test("other actions with a prefetchable route do not count, nor names without the beagle: namespace")
    func otherActions() {
        let component = JSONValue.array([
            action("beagle:popView", url: "/a"),
            action("beagle:popToView", url: "/b"),
            action("beagle:openNativeRoute", url: "/c"),
            action("beagle:sendRequest", url: "/d"),
            action("pushView", url: "/e"),
            action("custom:pushView", url: "/f"),
            .object(["_beagleComponent_": .string("beagle:pushView"), "route": action(url: "/g")["route"]!]),
        ])
        #expect(planner.plan(for: component) == PrefetchPlanner.Plan())
    }

    @Test(
        "shouldPrefetch must be the boolean true",
        arguments: [nil, .bool(false), .string("true"), .number(1), .null] as [JSONValue?]
    )
    func shouldPrefetchMustBeTrue(_ flag: JSONValue?) {
        #expect(planner.plan(for: action(url: .string("/a"), shouldPrefetch: flag)) == PrefetchPlanner.Plan())
    }

    @Test(
        "the URL must be a string literal",
        arguments: [.null, .number(1), .bool(true), .array([]), .object([:])] as [JSONValue]
    )
    func urlMustBeAString(_ url: JSONValue) {
        #expect(planner.plan(for: action(url: url)) == PrefetchPlanner.Plan())
    }

    @Test("a route that is not an object, or no route, does not count")
    func routeShapes() {
        let component = JSONValue.array([
            .object(["_beagleAction_": .string("beagle:pushView"), "route": .string("/a")]),
            .object(["_beagleAction_": .string("beagle:pushView")]),
            .object(["_beagleAction_": .number(1), "route": action(url: "/b")["route"]!]),
        ])
        #expect(planner.plan(for: component) == PrefetchPlanner.Plan())
    }

    @Test("actions are found at any depth, inside arrays, and inside other actions and their routes")
    func nesting() throws {
        let component = try json(
            """
            {
              "_beagleComponent_": "beagle:screenComponent",
              "child": {
                "_beagleComponent_": "beagle:container",
                "children": [
                  [[{ "_beagleComponent_": "beagle:button",
                      "onPress": [{ "_beagleAction_": "beagle:sendRequest", "url": "/api/x",
                                    "onSuccess": [{ "_beagleAction_": "beagle:pushView",
                                                    "route": { "url": "/deep", "shouldPrefetch": true } }] }] }]],
                  { "_beagleComponent_": "beagle:button",
                    "onPress": [{ "_beagleAction_": "beagle:pushStack",
                                  "route": { "url": "/outer", "shouldPrefetch": true,
                                             "fallback": { "_beagleComponent_": "beagle:screenComponent",
                                                           "child": { "onPress": [{
                                                             "_beagleAction_": "beagle:resetStack",
                                                             "route": { "url": "/fallback", "shouldPrefetch": true }
                                                           }] } } } }] }
                ]
              }
            }
            """
        )
        #expect(planner.plan(for: component).targets == ["/deep", "/outer", "/fallback"])
    }

    @Test("targets come in the order their actions appear in the component")
    func order() throws {
        let component = """
            { "zeta": [ { "_beagleAction_": "beagle:pushView", "route": { "url": "/z1", "shouldPrefetch": true } },
                        { "_beagleAction_": "beagle:pushView", "route": { "shouldPrefetch": true, "url": "/z2" } } ],
              "alpha": { "route": { "url": "/a", "shouldPrefetch": true }, "_beagleAction_": "beagle:pushView" },
              "mid": [ { "_beagleAction_": "beagle:pushView", "route": { "url": "/m2", "shouldPrefetch": true } },
                       { "_beagleAction_": "beagle:pushView", "route": { "url": "/m1", "shouldPrefetch": true } } ] }
            """
        #expect(planner.plan(forFile: Data(component.utf8)).targets == ["/z1", "/z2", "/a", "/m2", "/m1"])
    }

    @Test("httpAdditionalData: a GET (any case, with headers) is prefetched; another method or a body is not")
    func httpAdditionalData() throws {
        let component = try json(
            """
            [
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/get", "shouldPrefetch": true,
                "httpAdditionalData": { "method": "get", "headers": { "x": "y" } } } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/null-method", "shouldPrefetch": true,
                "httpAdditionalData": { "method": null, "body": null } } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/post", "shouldPrefetch": true,
                "httpAdditionalData": { "method": "POST" } } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/get-body", "shouldPrefetch": true,
                "httpAdditionalData": { "method": "GET", "body": { "a": 1 } } } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/method-number", "shouldPrefetch": true,
                "httpAdditionalData": { "method": 1 } } }
            ]
            """
        )
        let plan = planner.plan(for: component)
        #expect(plan.targets == ["/get", "/null-method"])
        #expect(
            plan.skipped == [
                Skipped(url: "/post", reason: .notPlainGET),
                Skipped(url: "/get-body", reason: .notPlainGET),
                Skipped(url: "/method-number", reason: .notPlainGET),
            ]
        )
    }

    @Test("names, keys and methods with escapes count as what they spell; of duplicate members the last counts")
    func escapesAndDuplicateMembers() {
        let component = #"""
            [
              { "_beagleAction_": "beagle:push\u0056iew", "route": { "url": "/escaped-name", "shouldPrefetch": true } },
              { "_beagle\u0041ction_": "beagle:pushView", "r\u006Fute": { "\u0075rl": "/escaped-keys",
                "shouldPrefetch": true, "httpAdditionalData": { "method": "G\u0065T" } } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/first", "url": "/last",
                "shouldPrefetch": false, "shouldPrefetch": true } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/dropped", "shouldPrefetch": true },
                "route": { "url": "/not-asked" } },
              { "_beagleAction_": "beagle:pushView", "_beagleAction_": "beagle:popView",
                "route": { "url": "/not-navigation", "shouldPrefetch": true } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/additional-data-not-an-object",
                "shouldPrefetch": true, "httpAdditionalData": "POST" } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/get-then-post", "shouldPrefetch": true,
                "httpAdditionalData": { "method": "GET", "method": "POST" } } }
            ]
            """#
        let plan = planner.plan(forFile: Data(component.utf8))
        #expect(plan.targets == ["/escaped-name", "/escaped-keys", "/last", "/additional-data-not-an-object"])
        #expect(plan.skipped == [Skipped(url: "/get-then-post", reason: .notPlainGET)])
    }

    @Test("keys as long as a kept key, and alike in their first eight bytes or all but one, are other keys")
    func nearMissKeys() {
        let component = #"""
            [
              { "_beagleActioN_": "beagle:pushView", "route": { "url": "/a", "shouldPrefetch": true } },
              { "_beagleAction_": "beagle:pushView", "routE": { "url": "/b", "shouldPrefetch": true } },
              { "_beagleAction_": "beagle:pushView", "route": { "urL": "/c", "shouldPrefetch": true } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/d", "shouldPrefetcH": true } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/e", "shouldPrefetch": true,
                "httpAdditionalDatA": { "method": "POST" }, "httpAdditionalData": { "methoD": "POST" } } },
              { "_beagleAction_": "beagle:pushView", "route": { "url": "/f", "shouldPrefetch": true,
                "httpAdditionalData": { "method": "GET", "bodY": "x" } } }
            ]
            """#
        #expect(planner.plan(forFile: Data(component.utf8)).targets == ["/e", "/f"])
    }

    @Test("targets and skipped URLs are deduplicated, also across spellings of one target")
    func deduplication() throws {
        let planner = try makePlanner("http://backend:8081/bff", allowedHosts: ["proxy.example"])
        let component = JSONValue.array([
            action(url: "/screens/a"),
            action("beagle:pushStack", url: "/screens/./x/../a"),
            action(url: "http://backend:8081/bff/screens/a"),
            action(url: "https://PROXY.example/screens/%61"),
            action(url: "/screens/@{id}"),
            action(url: "/screens/@{id}"),
            action(url: "/screens/b"),
        ])
        let plan = planner.plan(for: component)
        #expect(plan.targets == ["/screens/a", "/screens/b"])
        #expect(plan.skipped == [Skipped(url: "/screens/@{id}", reason: .expression)])
    }
}

// MARK: - Resolving URLs

@Suite("PrefetchPlanner: resolving URLs")
struct PrefetchPlannerResolveTests {
    @Test("paths starting with / are relative to the upstream base and normalised like request targets")
    func relativePaths() throws {
        let planner = try makePlanner("http://backend:8081/bff")
        #expect(planner.resolve("/screens/home") == .success("/screens/home"))
        #expect(planner.resolve("/screens/./a/../b") == .success("/screens/b"))
        #expect(planner.resolve("/screens/%7Euser") == .success("/screens/~user"))
        #expect(planner.resolve("/user/Name Of User") == .success("/user/Name%20Of%20User"))
        #expect(planner.resolve("/imagens/Itacaré") == .success("/imagens/Itacar%C3%A9"))
        #expect(planner.resolve("/a?x=1&y=2#top") == .success("/a?x=1&y=2"))
        #expect(planner.resolve("/a?") == .success("/a"))
        #expect(planner.resolve("/") == .success("/"))
        #expect(planner.resolve("//weirdPath") == .success("//weirdPath"))
        #expect(planner.resolve("/../../etc/passwd") == .success("/etc/passwd"))
    }

    @Test("paths that do not build into a request target are invalid")
    func invalidTargets() throws {
        let planner = try makePlanner("http://backend:8081")
        #expect(planner.resolve("/100%") == .failure(.invalidTarget))
        #expect(planner.resolve("/a%20b c") == .failure(.invalidTarget))
        #expect(planner.resolve("/a%zz") == .failure(.invalidTarget))
    }

    @Test(
        "empty strings, bare names, other schemes and URLs with user information are unsupported",
        arguments: [
            "", "absolutePath", "screens/home", "schema://path", "beagle://screen", "ftp://backend:8081/x",
            "mailto:a@b", "http://user@backend:8081/x", "http:///x", "https://",
        ]
    )
    func unsupported(_ url: String) throws {
        #expect(try makePlanner("http://backend:8081").resolve(url) == .failure(.unsupportedURL))
    }

    @Test(
        "an expression anywhere in the URL means the device resolves it",
        arguments: [
            "@{url}", "/screens/@{id}", "/screens?q=@{context.query}", "https://backend:8081/@{x}", "@{",
        ]
    )
    func expressions(_ url: String) throws {
        #expect(try makePlanner("http://backend:8081").resolve(url) == .failure(.expression))
    }

    @Test("an @ that does not open an expression is just a character")
    func atSign() throws {
        #expect(try makePlanner("http://backend:8081").resolve("/users/@me") == .success("/users/@me"))
    }

    @Test("absolute URLs on the upstream origin: the base path is removed, and required")
    func upstreamOriginWithBasePath() throws {
        let planner = try makePlanner("http://Backend:8081/bff/")
        #expect(planner.resolve("http://backend:8081/bff/screens/x") == .success("/screens/x"))
        #expect(planner.resolve("HTTP://BACKEND:8081/bff/screens/x?a=1") == .success("/screens/x?a=1"))
        #expect(planner.resolve("http://backend:8081/bff") == .success("/"))
        #expect(planner.resolve("http://backend:8081/bff/") == .success("/"))
        #expect(planner.resolve("http://backend:8081/bff?a=1") == .success("/?a=1"))
        #expect(planner.resolve("http://backend:8081/bffx/screens") == .failure(.outsideBasePath))
        #expect(planner.resolve("http://backend:8081/BFF/screens") == .failure(.outsideBasePath))
        #expect(planner.resolve("http://backend:8081/screens/x") == .failure(.outsideBasePath))
        #expect(planner.resolve("http://backend:8081/bff/../admin") == .failure(.outsideBasePath))
        #expect(planner.resolve("http://backend:8081/bff/%2E%2E/admin") == .failure(.outsideBasePath))
    }

    @Test("absolute URLs on the upstream origin without a base path keep their whole path")
    func upstreamOriginAtRoot() throws {
        let planner = try makePlanner("https://api.example.com")
        #expect(planner.resolve("https://api.example.com/screens/x") == .success("/screens/x"))
        #expect(planner.resolve("https://api.example.com:443/screens/x") == .success("/screens/x"))
        #expect(planner.resolve("https://api.example.com") == .success("/"))
    }

    @Test("the upstream origin means scheme, host and port")
    func originMustMatchExactly() throws {
        let planner = try makePlanner("http://backend:8081")
        #expect(planner.resolve("https://backend:8081/x") == .failure(.foreignHost("backend:8081")))
        #expect(planner.resolve("http://backend/x") == .failure(.foreignHost("backend")))
        #expect(planner.resolve("http://backend:8082/x") == .failure(.foreignHost("backend:8082")))
        #expect(planner.resolve("http://backend.evil.com:8081/x") == .failure(.foreignHost("backend.evil.com:8081")))
        #expect(planner.resolve("https://www.google.com/search?q=x") == .failure(.foreignHost("www.google.com")))
    }

    @Test("allowed hosts: host alone matches any port, host:port only that port, letter case never matters")
    func allowedHosts() throws {
        let planner = try makePlanner(
            "http://backend:8081/bff",
            allowedHosts: ["Proxy.Example.com", "edge.example.com:8443", "[::1]:8080", "", "https://bad.example"]
        )
        #expect(planner.resolve("https://proxy.example.com/screens/x") == .success("/screens/x"))
        #expect(planner.resolve("http://PROXY.EXAMPLE.COM:9000/screens/x?y=1") == .success("/screens/x?y=1"))
        #expect(planner.resolve("https://edge.example.com:8443/a") == .success("/a"))
        #expect(planner.resolve("https://edge.example.com/a") == .failure(.foreignHost("edge.example.com")))
        #expect(planner.resolve("http://[::1]:8080/a") == .success("/a"))
        #expect(planner.resolve("http://[::1]:8081/a") == .failure(.foreignHost("[::1]:8081")))
        #expect(planner.resolve("https://bad.example/a") == .failure(.foreignHost("bad.example")))
        #expect(planner.resolve("https://proxy.example.com.evil/a") == .failure(.foreignHost("proxy.example.com.evil")))
    }

    @Test("URLs on an allowed host keep their path: it is a path of this proxy, not of the backend")
    func allowedHostPathsAreNotStripped() throws {
        let planner = try makePlanner("http://backend:8081/bff", allowedHosts: ["proxy.example.com"])
        #expect(planner.resolve("https://proxy.example.com/bff/screens/x") == .success("/bff/screens/x"))
        #expect(planner.resolve("https://proxy.example.com/../x") == .success("/x"))
    }

    @Test("a directory upstream: paths and URLs on allowed hosts only")
    func directoryUpstream() throws {
        let planner = try makePlanner("file:config/samples", allowedHosts: ["localhost:8080"])
        #expect(planner.resolve("/screens/home") == .success("/screens/home"))
        #expect(planner.resolve("http://localhost:8080/screens/home") == .success("/screens/home"))
        #expect(planner.resolve("http://localhost:9090/screens/home") == .failure(.foreignHost("localhost:9090")))
        #expect(planner.resolve("file:config/samples/screens/home") == .failure(.unsupportedURL))
    }
}

// MARK: - Limits

@Suite("PrefetchPlanner: limits")
struct PrefetchPlannerLimitTests {
    let planner: PrefetchPlanner

    init() throws {
        planner = try makePlanner("http://backend:8081")
    }

    @Test("actions down to the depth limit are found; deeper containers are not visited")
    func depth() {
        let limit = PrefetchPlanner.maximumDepth
        #expect(limit == 64)

        let withinLimit = planner.plan(for: nested(action(url: "/a"), levels: limit - 1))
        #expect(withinLimit.targets == ["/a"])
        #expect(!withinLimit.truncated)

        // At the limit the action is seen, but its route object one level down is not walked.
        let atLimit = planner.plan(for: nested(action(url: "/a"), levels: limit))
        #expect(atLimit.targets == ["/a"])
        #expect(atLimit.truncated)

        let beyondLimit = planner.plan(for: nested(action(url: "/a"), levels: limit + 1))
        #expect(beyondLimit.targets.isEmpty)
        #expect(beyondLimit.truncated)
    }

    @Test("a deep document is read to its end; past the JSON nesting limit it has no plan")
    func veryDeep() {
        let deep = planner.plan(for: .array([action(url: "/top"), nested(action(url: "/deep"), levels: 500)]))
        #expect(deep.targets == ["/top"])
        #expect(deep.truncated)

        // The fetcher refuses such a body as JSON, so it is never stored and never planned.
        let top = #"{ "_beagleAction_": "beagle:pushView", "route": { "url": "/top", "shouldPrefetch": true } }"#
        let tooDeep = "[" + top + "," + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_001)
        #expect(planner.plan(forFile: Data(tooDeep.utf8)) == PrefetchPlanner.Plan())
    }

    @Test("a body that is not JSON has an empty plan")
    func notJSON() {
        let text = #"{ "_beagleAction_": "beagle:pushView", "route": { "url": "/a", "shouldPrefetch": true } "#
        #expect(planner.plan(forFile: Data(text.utf8)) == PrefetchPlanner.Plan())
        #expect(planner.plan(forFile: Data((text + "}").utf8)).targets == ["/a"])
    }

    @Test("at most maximumTargets distinct targets; duplicates do not count against the limit")
    func targetLimit() {
        let limit = PrefetchPlanner.maximumTargets
        #expect(limit == 64)

        let exactly = planner.plan(
            for: .array((0..<limit).flatMap { [action(url: "/s/\($0)"), action(url: "/s/\($0)")] })
        )
        #expect(exactly.targets.count == limit)
        #expect(!exactly.truncated)

        let tooMany = planner.plan(for: .array((0..<1000).map { action(url: "/s/\($0)") }))
        #expect(tooMany.targets == (0..<limit).map { "/s/\($0)" })
        #expect(tooMany.truncated)
    }

    @Test("at most maximumActions actions are read; the plan says it is truncated")
    func actionLimit() {
        let alerts = (0..<PrefetchPlanner.maximumActions).map { _ in
            JSONValue.object(["_beagleAction_": .string("beagle:alert")])
        }
        let plan = planner.plan(for: .array([action(url: "/first")] + alerts + [action(url: "/late")]))
        #expect(plan.targets == ["/first"])
        #expect(plan.truncated)
    }

    @Test("at most maximumSkipped skipped URLs are recorded, and targets after them are still found")
    func skippedLimit() {
        let limit = PrefetchPlanner.maximumSkipped
        let foreign = (0..<1000).map { action(url: "https://host\($0).example/x") }
        let plan = planner.plan(for: .array(foreign + [action(url: "/after")]))
        #expect(plan.skipped.count == limit)
        #expect(plan.skipped.first == Skipped(url: "https://host0.example/x", reason: .foreignHost("host0.example")))
        #expect(plan.targets == ["/after"])
        #expect(plan.truncated)
    }
}
