import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Methods beyond the ones NIO names (RFC 9110 section 9.1, RFC 9111 section 4.4), against a real origin over
/// loopback. NIO's own decoder refuses methods it does not know, so the origin here reads request lines itself.
@Suite("RFC 9110 §9.1: extension methods")
struct ExtensionMethodTests {
    @Test("RFC 9110 §9.1: a method the proxy has never heard of is forwarded exactly as received, body and all")
    func forwardedAsReceived() async throws {
        try await ProxyHarness.run(behind: RawOrigin.componentOrNoContent) { proxy, origin async throws in
            for method in ["BREW", "M-SEARCH", "get", "PROPFIND"] {
                let reply = try await proxy.get("/pot", method: HTTPMethod(rawValue: method), body: "hi")
                #expect(reply.status == .noContent, "\(method)")
                #expect(reply["Cache-Status"] == nil, "\(method): not on the cache path")
            }
            #expect(origin.requestLines == ["BREW /pot", "M-SEARCH /pot", "get /pot", "PROPFIND /pot"])
            #expect(origin.bodies == ["hi", "hi", "hi", "hi"])
        }
    }

    @Test("RFC 9111 §4.4: a 2xx to any unsafe method invalidates its target; OPTIONS and TRACE do not")
    func invalidation() async throws {
        try await ProxyHarness.run(behind: RawOrigin.componentOrNoContent) { proxy, origin async throws in
            for (method, invalidates) in [("OPTIONS", false), ("TRACE", false), ("BREW", true), ("PURGE", true)] {
                _ = try await proxy.get("/screens/a")
                #expect(try await proxy.get("/screens/a")["X-Cache"] == "HIT")
                _ = try await proxy.get("/screens/a", method: HTTPMethod(rawValue: method))
                let after = try await proxy.get("/screens/a")["X-Cache"]
                #expect(after == (invalidates ? "MISS" : "HIT"), "\(method)")
            }
        }
    }

    @Test(
        "CONNECT is still refused: this is not a forward proxy",
        arguments: [("example.com:443", "400"), ("/tunnel", "405")]
    )
    func connectRefused(target: String, status: String) async throws {
        try await ProxyHarness.run { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            try await connection.send("CONNECT \(target) HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            let reply = try #require(try await connection.readResponse())
            #expect(reply.head.hasPrefix("HTTP/1.1 \(status)"), "\(reply.head)")
            #expect(proxy.origin.requestCount == 0)
            await connection.close()
        }
    }
}
