import Foundation
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// The admin listener's view of what is cached: listed by prefix and platform, bounded, and one target's stored
/// heads with their cookies' values hidden; never a body.
@Suite("what is cached: GET /cache/entries and GET /cache/entry")
struct CacheEntriesViewTests {
    private static func object(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    @Test("entries under a prefix, by platform, with sizes, age, lifetime and tags; at most limit")
    func listsEntries() async throws {
        try await ProxyHarness.run(origin: { request in
            var response = TestOrigin.Response.component(
                maxAge: 60,
                extra: #","filler":"\#(String(repeating: "x", count: 600))""#
            )
            response.headers.append(("Surrogate-Key", "home screens"))
            if request.uri.hasPrefix("/screens/home") {
                response.headers.append(("Set-Cookie", "session=s3cret; Path=/"))
            }
            return response
        }) { proxy in
            for path in ["/screens/home", "/screens/cart?tab=2", "/other/page"] {
                #expect(try await proxy.get(path, headers: [("beagle-platform", "ios")]).status == .ok)
            }
            #expect(try await proxy.get("/screens/home", headers: [("beagle-platform", "android")]).status == .ok)

            let all = Self.object(try await proxy.admin("/cache/entries?prefix=/screens/").body)
            #expect(all["count"] as? Int == 3)
            #expect(all["more"] as? Bool == false)
            let entries = try #require(all["entries"] as? [[String: Any]])
            #expect(Set(entries.compactMap { $0["url"] as? String }) == ["/screens/home", "/screens/cart?tab=2"])
            let home = try #require(
                entries.first { $0["url"] as? String == "/screens/home" && $0["platform"] as? String == "IOS" },
                "\(entries)"
            )
            #expect(home["status"] as? Int == 200)
            #expect(home["tags"] as? [String] == ["home", "screens"])
            #expect(((home["ttlSeconds"] as? Int) ?? 0) > 50)
            #expect(((home["ageSeconds"] as? Int) ?? -1) >= 0)
            let bytes = try #require(home["bytes"] as? [String: Int])
            #expect((bytes["identity"] ?? 0) > 600)
            #expect(home["headers"] == nil, "the list shows no heads")

            let ios = Self.object(try await proxy.admin("/cache/entries?prefix=/screens/&platform=ios&limit=1").body)
            #expect(ios["count"] as? Int == 1)
            #expect(ios["more"] as? Bool == true)
            #expect(try await proxy.admin("/cache/entries?limit=0").status == .badRequest)
            #expect(try await proxy.admin("/cache/entries?prefix=screens").status == .badRequest)
            #expect(try await proxy.admin("/cache/entries?size=3").status == .badRequest)

            // One target on one platform: its stored head, the cookie's value hidden, and never the body.
            let entry = try await proxy.admin("/cache/entry?platform=ios&url=/screens/home")
            #expect(entry.status == .ok)
            #expect(!entry.body.contains("s3cret") && !entry.body.contains("filler"), "\(entry.body)")
            let variants = try #require(Self.object(entry.body)["variants"] as? [[String: Any]])
            #expect(variants.count == 1)
            let headers = try #require(variants.first?["headers"] as? [[String]])
            #expect(headers.contains(["Set-Cookie", "session=<redacted>; Path=/"]), "\(headers)")
            let withQuery = try await proxy.admin("/cache/entry?platform=ios&url=/screens/cart?tab=2")
            #expect(withQuery.status == .ok, "\(withQuery.body)")
            #expect(try await proxy.admin("/cache/entry?platform=ios&url=/screens/none").status == .notFound)
            #expect(try await proxy.admin("/cache/entry?url=/screens/home").status == .badRequest)
        }
    }

    @Test(
        "a cookie's value is hidden, its name and attributes kept",
        arguments: [
            ("a=b", "a=<redacted>"), ("id=1; Secure; HttpOnly", "id=<redacted>; Secure; HttpOnly"),
            ("odd", "odd=<redacted>"),
        ]
    )
    func cookies(value: String, shown: String) {
        #expect(CacheEntriesView.redactedCookie(value) == shown)
    }
}
