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
}
