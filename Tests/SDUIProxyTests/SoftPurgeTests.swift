import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Soft purges over real sockets: the purged entry stays, stale, for stale-while-revalidate, stale-if-error and
/// revalidation to use; a hard purge still removes it.
@Suite("Soft purge against a real origin")
struct SoftPurgeTests {
    @Test("with stale-while-revalidate, the next request gets the stale copy at once and one refresh is made")
    func staleWhileRevalidate() async throws {
        let version = NIOLockedValueBox(1)
        try await ProxyHarness.run(origin: { _ in
            let current = version.withLockedValue { $0 }
            return TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=300, stale-while-revalidate=60"),
                ],
                body: #"{"_beagleComponent_":"a","v":\#(current)}"#
            )
        }) { proxy async throws in
            #expect(try await proxy.get("/s")["X-Cache"] == "MISS")
            #expect(try await proxy.get("/s")["X-Cache"] == "HIT")
            version.withLockedValue { $0 = 2 }
            let purge = try await proxy.admin("/cache?url=/s&soft=true", method: .DELETE)
            #expect(purge.body == #"{"purged":1,"inFlight":0,"url":"/s","soft":true}"#)

            let stale = try await proxy.get("/s")
            #expect(stale["X-Cache"] == "STALE")
            #expect(stale.body.contains(#""v":1"#))
            try await waitUntil { proxy.origin.requestCount == 2 }
            // The refresh is stored once its answer has arrived; until then the stale copy is served.
            try await waitUntil { try await proxy.get("/s")["X-Cache"] == "HIT" }
            let refreshed = try await proxy.get("/s")
            #expect(refreshed.body.contains(#""v":2"#))
            #expect(proxy.origin.requestCount == 2)
            let stats = try await proxy.admin("/cache/stats").body
            #expect(stats.contains(#""purged":0,"softPurged":1,"#))
        }
    }

    @Test("with an ETag and no stale-while-revalidate, the next request revalidates and a 304 keeps the body")
    func revalidates() async throws {
        try await ProxyHarness.run(origin: { request in
            if request.headers.first(name: "if-none-match") == "\"v1\"" {
                return TestOrigin.Response(status: .notModified, headers: [("Cache-Control", "max-age=300")])
            }
            return TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=300"), ("ETag", "\"v1\"")],
                body: #"{"_beagleComponent_":"a","v":1}"#
            )
        }) { proxy async throws in
            let first = try await proxy.get("/r")
            #expect(first["X-Cache"] == "MISS")
            let purge = try await proxy.admin("/cache?soft=true&url=/r", method: .DELETE)
            #expect(purge.body == #"{"purged":1,"inFlight":0,"url":"/r","soft":true}"#)

            let revalidated = try await proxy.get("/r")
            #expect(revalidated.status == .ok)
            #expect(revalidated["X-Cache"] == "REVALIDATED")
            #expect(revalidated.body == first.body)
            #expect(proxy.origin.requestCount == 2)
            #expect(proxy.origin.requests.last?.headers.first(name: "if-none-match") == "\"v1\"")
            #expect(try await proxy.get("/r")["X-Cache"] == "HIT")
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("with stale-if-error, the purged copy stands in when the backend then fails")
    func staleIfError() async throws {
        let failing = NIOLockedValueBox(false)
        try await ProxyHarness.run(origin: { _ in
            if failing.withLockedValue({ $0 }) { return TestOrigin.Response(status: .serviceUnavailable, body: "down") }
            return TestOrigin.Response(
                headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=300, stale-if-error=60")],
                body: #"{"_beagleComponent_":"a","v":1}"#
            )
        }) { proxy async throws in
            let first = try await proxy.get("/e")
            let purge = try await proxy.admin("/cache?prefix=/e&soft=true", method: .DELETE)
            #expect(purge.body == #"{"purged":1,"inFlight":0,"prefix":"/e","soft":true}"#)
            failing.withLockedValue { $0 = true }

            let served = try await proxy.get("/e")
            #expect(served.status == .ok)
            #expect(served["X-Cache"] == "STALE")
            #expect(served.body == first.body)
            #expect(proxy.origin.requestCount == 2)
        }
    }

    @Test("a hard purge still removes: the next request is a plain miss")
    func hardPurgeRemoves() async throws {
        try await ProxyHarness.run(origin: { _ in
            TestOrigin.Response(
                headers: [
                    ("Content-Type", "application/json"), ("Cache-Control", "max-age=300, stale-while-revalidate=60"),
                    ("ETag", "\"v1\""),
                ],
                body: #"{"_beagleComponent_":"a"}"#
            )
        }) { proxy async throws in
            _ = try await proxy.get("/h")
            let purge = try await proxy.admin("/cache?url=/h&soft=false", method: .DELETE)
            #expect(purge.body == #"{"purged":1,"inFlight":0,"url":"/h"}"#)
            let next = try await proxy.get("/h")
            #expect(next["X-Cache"] == "MISS")
            #expect(proxy.origin.requestCount == 2)
            #expect(proxy.origin.requests.last?.headers.first(name: "if-none-match") == nil)
            let stats = try await proxy.admin("/cache/stats").body
            #expect(stats.contains(#""purged":1,"softPurged":0,"#))
        }
    }
}
