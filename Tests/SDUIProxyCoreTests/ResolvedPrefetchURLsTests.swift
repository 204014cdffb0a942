import NIOCore
import Testing

@testable import SDUIProxyCore

@Suite("Prefetch URLs resolved once a thread, by their bytes")
struct ResolvedPrefetchURLsTests {
    /// URLs of every kind the planner tells apart: its backend's, relative, another host's, an expression, one it
    /// refuses, the same URL spelled with an escape, and one of each twice over in other spellings.
    private static let urls = [
        "/screens/cart", "/screens/home?tab=1", "http://localhost:8080/screens/b", "https://elsewhere.example/c",
        "/screens/@{id}", "screens/relative", "/scr\\u0065ens/cart", "/screens/%7Ehome", "/screens/../x", "//x",
        "http://LOCALHOST:8080/screens/b", "/screens/cart#top", "/screens/é", "/screens/e\\u0301",
    ]

    /// A screen whose actions declare `urls`, each a plain GET or not as `plain` says.
    private static func screen(_ urls: [(url: String, plain: Bool)]) -> String {
        let actions = urls.map { url, plain in
            let data = plain ? "" : #","httpAdditionalData":{"method":"POST"}"#
            return #"{"_beagleAction_":"beagle:pushView","route":{"url":"\#(url)","shouldPrefetch":true\#(data)}}"#
        }
        return #"{"_beagleComponent_":"beagle:screenComponent","child":{"onPress":["#
            + actions.joined(separator: ",") + "]}}"
    }

    private static func plan(
        _ document: String,
        by planner: PrefetchPlanner,
        resolved: inout ResolvedPrefetchURLs
    ) throws -> PrefetchPlanner.Plan {
        try ByteBuffer(string: document).withUnsafeReadableBytes { bytes in
            let scan = try PrefetchPlanner.scan(bytes)
            return planner.plan(for: scan, in: bytes, resolved: &resolved)
        }
    }

    @Test("plans made one after the other by two planners sharing what they resolved are each planner's own")
    func sharedOutcomesMatchFreshOnes() throws {
        let planners = [
            PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: []),
            PrefetchPlanner(
                upstream: try UpstreamOrigin(parsing: "http://localhost:8080/bff"),
                allowedHosts: ["elsewhere.example"]
            ),
        ]
        var resolved = ResolvedPrefetchURLs()
        var random = SplitMix64(seed: 0x9E50_1E)
        var targets = 0
        for round in 0..<600 {
            let planner = planners[Int(random.next() % 2)]
            let declared = (0..<Int(1 + random.next() % 4)).map { _ in
                (url: Self.urls[Int(random.next() % UInt64(Self.urls.count))], plain: random.next() % 5 != 0)
            }
            let document = Self.screen(declared)
            var fresh = ResolvedPrefetchURLs()
            let expected = try Self.plan(document, by: planner, resolved: &fresh)
            let plan = try Self.plan(document, by: planner, resolved: &resolved)
            #expect(plan == expected, "round \(round): \(document)")
            targets += plan.targets.count
        }
        #expect(targets > 300)
    }

    @Test("a URL resolved is kept by its bytes and planner; escaped ones are not kept; the oldest makes room")
    func keptByBytesAndPlanner() throws {
        let planner = PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])
        let other = PrefetchPlanner(upstream: try UpstreamOrigin(parsing: "http://localhost:8080"), allowedHosts: [])
        var resolved = ResolvedPrefetchURLs()
        func kept(_ url: String, by planner: PrefetchPlanner) -> Bool {
            Array(url.utf8).withUnsafeBytes { resolved.resolved($0, by: planner.identity) != nil }
        }
        _ = try Self.plan(
            Self.screen([("/screens/cart", true), (#"/scr\u0065ens/x"#, true)]),
            by: planner,
            resolved: &resolved
        )
        #expect(kept("/screens/cart", by: planner) && !kept("/screens/cart", by: other))
        #expect(!kept(#"/scr\u0065ens/x"#, by: planner) && !kept("/screens/x", by: planner))
        // Eight more URLs: the first goes, the last eight stay.
        let more = (0..<ResolvedPrefetchURLs.capacity).map { (url: "/screens/\($0)", plain: true) }
        _ = try Self.plan(Self.screen(more), by: planner, resolved: &resolved)
        #expect(!kept("/screens/cart", by: planner))
        #expect(more.allSatisfy { kept($0.url, by: planner) })
        // A URL longer than the bound is resolved, not kept; one of the bound is kept.
        for length in [ResolvedPrefetchURLs.maximumURLBytes, ResolvedPrefetchURLs.maximumURLBytes + 1] {
            let long = "/" + String(repeating: "s", count: length - 1)
            let plan = try Self.plan(Self.screen([(long, true)]), by: planner, resolved: &resolved)
            #expect(plan.targets == [long])
            #expect(kept(long, by: planner) == (length <= ResolvedPrefetchURLs.maximumURLBytes))
        }
    }
}
