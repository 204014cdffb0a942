import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("RFC 9110 §9.3.3: which POST answers may answer a later GET of their target")
struct PostAnswerReuseTests {
    private func decide(
        _ headers: [(String, String)],
        status: HTTPResponseStatus = .ok,
        target: String = "/screens/cart?v=2",
        host: String? = "shop.example"
    ) -> PostAnswerReuse.Decision {
        PostAnswerReuse.decide(
            target: target,
            requestHost: host,
            status: status,
            fields: HTTPFieldLines(HTTPHeaders(headers))
        )
    }

    @Test("RFC 9110 §9.3.3: a 200 with max-age, s-maxage or Expires and a Content-Location of its own target is kept")
    func kept() {
        #expect(decide([("Cache-Control", "max-age=60"), ("Content-Location", "/screens/cart?v=2")]) == .keep)
        #expect(decide([("Cache-Control", "s-maxage=5"), ("Content-Location", "/screens/cart?v=2")]) == .keep)
        #expect(
            decide([
                ("Expires", "Thu, 01 Dec 2099 16:00:00 GMT"), ("Date", "Thu, 01 Dec 2026 16:00:00 GMT"),
                ("Content-Location", "/screens/cart?v=2"),
            ]) == .keep
        )
        #expect(
            decide(
                [("Cache-Control", "max-age=60"), ("Content-Location", "/screens/cart?v=2")],
                status: .nonAuthoritativeInformation
            )
                == .keep
        )
    }

    @Test("RFC 9110 §8.7: an absolute Content-Location names the target only on the request's own host and port")
    func absoluteLocation() {
        let fresh = ("Cache-Control", "max-age=60")
        #expect(decide([fresh, ("Content-Location", "https://shop.example/screens/cart?v=2")]) == .keep)
        #expect(decide([fresh, ("Content-Location", "http://SHOP.example:80/screens/cart?v=2")]) == .keep)
        #expect(
            decide(
                [fresh, ("Content-Location", "http://shop.example:8080/screens/cart?v=2")],
                host: "shop.example:8080"
            )
                == .keep
        )
        #expect(decide([fresh, ("Content-Location", "http://evil.example/screens/cart?v=2")]) != .keep)
        #expect(decide([fresh, ("Content-Location", "http://shop.example:8080/screens/cart?v=2")]) != .keep)
        #expect(decide([fresh, ("Content-Location", "http://shop.example/screens/cart?v=2")], host: nil) != .keep)
    }

    @Test("RFC 9110 §9.3.3: without explicit freshness, or naming another resource, nothing is kept")
    func skipped() {
        #expect(decide([("Content-Location", "/screens/cart?v=2")]) == .skip("no explicit freshness"))
        #expect(decide([("Cache-Control", "max-age=60")]) == .skip("no Content-Location"))
        for other in [
            "/screens/cart", "/screens/cart?v=3", "screens/cart?v=2", "//shop.example/screens/cart?v=2",
            "/screens/../screens/cart?v=2",
        ] {
            #expect(
                decide([("Cache-Control", "max-age=60"), ("Content-Location", other)])
                    == .skip("Content-Location names another resource"),
                "\(other)"
            )
        }
        // A created resource, an empty answer, a redirect: none is a representation of the target.
        for status in [HTTPResponseStatus.created, .noContent, .seeOther, .notFound] {
            guard
                case .skip = decide(
                    [("Cache-Control", "max-age=60"), ("Content-Location", "/screens/cart?v=2")],
                    status: status
                )
            else {
                Issue.record("\(status) kept")
                continue
            }
        }
        // The cookie was for the client that posted.
        #expect(
            decide([("Cache-Control", "max-age=60"), ("Content-Location", "/screens/cart?v=2"), ("Set-Cookie", "s=1")])
                == .skip("it sets a cookie")
        )
    }
}
