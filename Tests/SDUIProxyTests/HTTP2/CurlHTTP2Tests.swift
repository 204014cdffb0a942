import Foundation
import NIOCore
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// curl as the client, where it is installed with HTTP/2: prior knowledge (h2c) beside HTTP/1.1 on one
/// clear-text port, and HTTP/2 or HTTP/1.1 over TLS as ALPN agrees.
@Suite("curl speaks to the public listener")
struct CurlHTTP2Tests {
    static let curlSpeaksHTTP2: Bool = {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else { return false }
        return (try? ReadmeSessionTests.shell("curl --version"))?.joined(separator: " ").contains("HTTP2") ?? false
    }()

    /// The protocol version and status curl reports, then the response's header lines, lower-cased.
    private static func curl(_ arguments: String) throws -> (outcome: String, headers: [String]) {
        let lines = try ReadmeSessionTests.shell(
            "curl -s -o /dev/null -D - -w 'outcome: %{http_version} %{http_code}\\n' " + arguments
        )
        let outcome = lines.last { $0.hasPrefix("outcome: ") }.map { String($0.dropFirst(9)) } ?? ""
        return (outcome, lines.map { $0.lowercased() })
    }

    @Test(
        "clear text: HTTP/2 by prior knowledge and HTTP/1.1 on the same port, one cache",
        .enabled(if: curlSpeaksHTTP2, "curl with HTTP/2: apt-get install curl")
    )
    func priorKnowledge() async throws {
        try await ProxyHarness.run { proxy in
            let url = "http://127.0.0.1:\(proxy.server.publicPort)/screens/a"
            let miss = try Self.curl("--http2-prior-knowledge " + url)
            #expect(miss.outcome == "2 200")
            #expect(miss.headers.contains("x-cache: miss"))
            let hit = try Self.curl("--http2-prior-knowledge " + url)
            #expect(hit.outcome == "2 200")
            #expect(hit.headers.contains("x-cache: hit"))
            let http1 = try Self.curl("--http1.1 " + url)
            #expect(http1.outcome == "1.1 200")
            #expect(http1.headers.contains("x-cache: hit"), "HTTP/1.1 reads what HTTP/2 stored")
            #expect(proxy.origin.requests.count == 1)
            #expect(proxy.origin.requests.first?.headers.first(name: "via") == "2 sdui-proxy")
        }
    }

    @Test(
        "TLS: HTTP/2 by ALPN, or HTTP/1.1 when that is all curl offers",
        .enabled(if: curlSpeaksHTTP2, "curl with HTTP/2: apt-get install curl")
    )
    func overTLS() async throws {
        try await PublicTLSTests.run { proxy in
            let authority = try proxy.certificates.writeAuthority()
            defer { try? FileManager.default.removeItem(atPath: authority) }
            let url = proxy.baseURL + "/screens/b"
            #expect(try Self.curl("--cacert \(authority) --http2 " + url).outcome == "2 200")
            let http1 = try Self.curl("--cacert \(authority) --http1.1 " + url)
            #expect(http1.outcome == "1.1 200")
            #expect(http1.headers.contains("x-cache: hit"))
        }
    }
}
