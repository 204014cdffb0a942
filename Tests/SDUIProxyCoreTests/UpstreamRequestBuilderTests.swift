import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("The headers of an upstream request")
struct UpstreamRequestBuilderTests {
    private let builder = UpstreamRequestBuilder(
        platformHeader: "beagle-platform",
        configuredHeaders: [("X-Api-Key", "secret"), ("Content-Type", "application/json"), ("x-tenant", "t1")]
    )

    private func pairs(_ headers: HTTPHeaders) -> [[String]] { headers.map { [$0.name, $0.value] } }

    @Test("a cache fill: the client's end-to-end headers, then the configured ones, the platform and the hop")
    func cacheFill() {
        let client = HTTPHeaders([
            ("Host", "proxy.example"), ("Accept", "application/json"), ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "dropped"), ("Keep-Alive", "timeout=5"), ("BEAGLE-PLATFORM", "WEB"), ("If-None-Match", "\"a\""),
            ("Range", "bytes=0-1"), ("Accept-Encoding", "gzip"), ("beagle-hash", "00"), ("X-Tenant", "client's"),
            ("X-Forwarded-For", "10.0.0.1"), ("Accept-Language", "pt-BR"), ("x-forwarded-for", "10.0.0.2"),
        ])
        let headers = builder.headers(from: client, platform: "IOS", clientAddress: "127.0.0.1", purpose: .cacheFill)
        #expect(
            pairs(headers) == [
                ["Accept", "application/json"], ["Accept-Language", "pt-BR"], ["X-Api-Key", "secret"],
                ["Content-Type", "application/json"], ["x-tenant", "t1"], ["beagle-platform", "IOS"],
                ["Accept-Encoding", "identity"], ["Via", "1.1 sdui-proxy"],
                ["X-Forwarded-For", "10.0.0.1, 10.0.0.2, 127.0.0.1"],
            ]
        )
    }

    @Test("a pass-through keeps conditional, range and encoding headers, and the client's Content-Type")
    func passThrough() {
        let client = HTTPHeaders([
            ("Content-Type", "text/plain"), ("If-None-Match", "\"a\""), ("Accept-Encoding", "gzip"),
            ("Content-Length", "4"), ("TE", "trailers"), ("Transfer-Encoding", "chunked"),
        ])
        let headers = builder.headers(from: client, platform: "ANDROID", clientAddress: nil, purpose: .passThrough)
        #expect(
            pairs(headers) == [
                ["Content-Type", "text/plain"], ["If-None-Match", "\"a\""], ["Accept-Encoding", "gzip"],
                ["Content-Length", "4"], ["X-Api-Key", "secret"], ["x-tenant", "t1"], ["beagle-platform", "ANDROID"],
                ["Via", "1.1 sdui-proxy"],
            ]
        )
    }

    @Test("without the client's address, the X-Forwarded-For the request carried goes on as it was")
    func forwardedForWithoutAddress() {
        let client = HTTPHeaders([("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "10.0.0.2")])
        let headers = builder.headers(from: client, platform: "WEB", clientAddress: nil, purpose: .cacheFill)
        #expect(headers["X-Forwarded-For"] == ["10.0.0.1, 10.0.0.2"])
        let none = builder.headers(from: [:], platform: "WEB", clientAddress: nil, purpose: .cacheFill)
        #expect(!none.contains(name: "x-forwarded-for"))
    }
}
