import NIOCore
import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("End-to-end response headers")
struct EndToEndHeadersTests {
    private func names(_ headers: [(String, String)]) -> [String] {
        UpstreamRequestBuilder.endToEndResponseHeaders(HTTPHeaders(headers)).map(\.name)
    }

    @Test("hop-by-hop headers are dropped, everything else kept in order")
    func hopByHop() {
        let kept = names([
            ("Content-Type", "application/json"), ("Connection", "keep-alive"), ("Keep-Alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"), ("ETag", "\"a\""), ("Upgrade", "h2c"), ("Cache-Control", "max-age=1"),
        ])
        #expect(kept == ["Content-Type", "ETag", "Cache-Control"])
    }

    @Test("headers the Connection header names are dropped too, in any letter case and across lines")
    func namedByConnection() {
        let kept = names([
            ("connection", "Keep-Alive, X-Secret ,x-other"), ("X-SECRET", "1"), ("X-Other", "2"),
            ("CONNECTION", "close"), ("Connection", " x-third"), ("x-third", "3"), ("X-Public", "4"),
        ])
        #expect(kept == ["X-Public"])
    }

    @Test("an entry made from a backend's headers keeps the end-to-end ones, without framing and Age, in order")
    func storedEntryEndToEndOnly() {
        let headers = HTTPHeaders([
            ("Content-Length", "12"), ("Connection", "keep-alive, X-Secret"), ("AGE", "3"), ("ETag", "\"a\""),
            ("Keep-Alive", "timeout=5"), ("x-secret", "1"), ("Cache-Control", "max-age=1"), ("age", "4"),
        ])
        let entry = CachedResponse(
            status: .ok,
            headers: headers,
            body: ByteBuffer(string: "{}"),
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60),
            endToEndOnly: true
        )
        #expect(entry.headers.map(\.name) == ["Cache-Control", "ETag", "Via"])
        #expect(
            String(decoding: entry.encodedHead(), as: UTF8.self)
                == "Cache-Control: max-age=1\r\nETag: \"a\"\r\nVia: 1.1 sdui-proxy\r\nContent-Length: 2\r\n"
        )
        // Without the flag only framing and Age go: the caller vouches for the rest.
        let trusted = CachedResponse(
            status: .ok,
            headers: headers,
            body: ByteBuffer(string: "{}"),
            metadata: .init(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        )
        #expect(
            trusted.headers.map(\.name) == [
                "Connection", "Keep-Alive", "x-secret", "Cache-Control", "ETag", "Via",
            ]
        )
    }

    @Test("keep-alive is decided as NIO decides it, for every mix of Connection values and both versions")
    func keepAliveAgreesWithNIO() {
        let values = [
            "close", "keep-alive", "Keep-Alive", "CLOSE", "upgrade", "keep-alive, close", " keep-alive ",
            "x-a, keep-alive", "keep-alive,keep-alive", "", ",", "keep-alive-ish", "closed",
        ]
        var lines: [[String]] = [[]] + values.map { [$0] }
        for first in values { for second in values { lines.append([first, second]) } }
        var compared = 0
        for version in [HTTPVersion.http1_0, .http1_1] {
            for connection in lines {
                let headers = HTTPHeaders([("Host", "x")] + connection.map { ("Connection", $0) })
                let nio = HTTPRequestHead(version: version, method: .GET, uri: "/", headers: headers).isKeepAlive
                #expect(HTTPSyntax.isKeepAlive(headers, version: version) == nio, "\(version) \(connection)")
                // The same decision made from the field lines as a parser reads them.
                let lines = headers.map { "\($0.name): \($0.value)" }.joined(separator: "\r\n")
                let parsed = try? Array(lines.utf8).withUnsafeBytes { bytes in
                    var reader = LineReader(bytes: bytes)
                    return try HTTPMessageSyntax.parseFields(&reader, failing: .network).0
                }
                #expect(parsed?.connection.keepsConnectionOpen(version: version) == nio, "\(version) \(connection)")
                compared += 1
            }
        }
        #expect(compared == 2 * (1 + 13 + 13 * 13))
    }
}

@Suite("Comparing header names")
struct HeaderNameComparisonTests {
    @Test("two names are the same ignoring ASCII case only, whatever their sizes")
    func sameIgnoringCase() {
        let long = String(repeating: "x-Long-Name-", count: 4)
        let pairs: [(String, String, Bool)] = [
            ("Beagle-Platform", "beagle-platform", true), ("SURROGATE-KEY", "surrogate-key", true),
            (long, long.uppercased(), true), (long, long + "x", false), ("a", "b", false), ("", "", true),
            ("[", "{", false), ("@", "`", false), ("Ä", "ä", false), ("x-a", "x_a", false),
            (String("--tag--".dropFirst(2).dropLast(2)), "TAG", true),
        ]
        for (lhs, rhs, same) in pairs {
            #expect(HTTPSyntax.sameIgnoringCase(lhs, rhs) == same, "\(lhs) \(rhs)")
            #expect(HTTPSyntax.sameIgnoringCase(rhs, lhs) == same, "\(rhs) \(lhs)")
        }
    }
}
