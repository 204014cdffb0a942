import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// `If-Modified-Since` answered from a fresh entry that has no `Last-Modified`: its `Date`, or the time it was
/// stored, stands in (RFC 9111 section 4.3.2, RFC 9110 section 13.1.3).
@Suite("If-Modified-Since without Last-Modified")
struct ModifiedSinceByDateTests {
    @Test("RFC 9111 §4.3.2: a stored Date not after the given date answers 304; a later one, the whole response")
    func byStoredDate() async throws {
        // Now, so that the entry is fresh (an older Date would age it past its lifetime at once).
        let now = HTTPDate.now()
        let date = HTTPDate.format(now)
        try await ProxyHarness.run(origin: { _ in
            var response = TestOrigin.Response.component(maxAge: 600)
            response.headers.append(("Date", date))
            return response
        }) { proxy in
            #expect(try await proxy.get("/screens/home").status == .ok)
            let same = try await proxy.get("/screens/home", headers: [("If-Modified-Since", date)])
            #expect(same.status == .notModified)
            let later = try await proxy.get(
                "/screens/home",
                headers: [("If-Modified-Since", HTTPDate.format(now + 86400))]
            )
            #expect(later.status == .notModified)
            let earlier = try await proxy.get(
                "/screens/home",
                headers: [("If-Modified-Since", HTTPDate.format(now - 86400))]
            )
            #expect(earlier.status == .ok)
            #expect(proxy.origin.requests.count == 1, "every answer came from the cache")
        }
    }

    @Test("RFC 9111 §4.3.2: without Date either, the time the entry was stored stands in")
    func byStoredTime() {
        var headers = HTTPHeaders()
        headers.add(name: "If-Modified-Since", value: HTTPDate.format(HTTPDate.now()))
        let stored = HTTPDate.now() - 10
        #expect(
            ConditionalRequest.isNotModified(
                requestHeaders: headers,
                etag: "\"e\"",
                lastModified: nil,
                storedDate: { stored }
            )
        )
        #expect(
            !ConditionalRequest.isNotModified(
                requestHeaders: headers,
                etag: "\"e\"",
                lastModified: nil,
                storedDate: { stored + 3600 }
            )
        )
        #expect(!ConditionalRequest.isNotModified(requestHeaders: headers, etag: "\"e\"", lastModified: nil))
        // Last-Modified, when there is one, decides: a stored date is not looked at.
        #expect(
            !ConditionalRequest.isNotModified(
                requestHeaders: headers,
                etag: "\"e\"",
                lastModified: HTTPDate.format(HTTPDate.now() + 3600),
                storedDate: { stored }
            )
        )
    }
}
