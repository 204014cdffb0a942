import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// A connection's requests reuse what the last one's fields were read and built as when they repeat
/// (``RepeatedRequestFields``, ``RepeatedUpstreamFields``): what reaches the backend must still be each request's own.
/// Guards of the whole path; that the reuse happens is for the two types' own tests.
@Suite("Repeated fields on one connection: each request reaches the backend with its own")
struct RepeatedFieldsEndToEndTests {
    @Test("HTTP/1.1 keep-alive: fills and forwards, with fields repeated, changed and changed back")
    func keepAliveRequestsCarryTheirOwnFields() async throws {
        try await ProxyHarness.run(origin: { request in
            request.method == .GET
                ? TestOrigin.Response.component()
                : TestOrigin.Response(status: .noContent, headers: [], body: "")
        }) { proxy async throws in
            let connection = try await RawConnection(port: proxy.server.publicPort)
            // Each a miss (its own path) or a forwarded POST, with the platform and a client field of its own.
            let requests: [(method: String, path: String, platform: String, tenant: String)] = [
                ("GET", "/screens/1", "IOS", "a"), ("GET", "/screens/2", "IOS", "a"),
                ("GET", "/screens/3", "ANDROID", "a"), ("POST", "/submit/4", "ANDROID", "a"),
                ("POST", "/submit/5", "ANDROID", "b"), ("GET", "/screens/6", "ANDROID", "b"),
                ("GET", "/screens/7", "IOS", "a"), ("POST", "/submit/8", "IOS", "a"),
            ]
            for request in requests {
                let body = request.method == "POST" ? "Content-Length: 2\r\n\r\n{}" : "\r\n"
                try await connection.send(
                    "\(request.method) \(request.path) HTTP/1.1\r\nHost: proxy\r\nbeagle-platform: \(request.platform)\r\n"
                        + "Accept-Language: \(request.tenant)\r\n" + body
                )
                let response = try #require(try await connection.readResponse())
                #expect(response.head.hasPrefix("HTTP/1.1 20"), "\(request)")
            }
            await connection.close()
            let received = proxy.origin.requests.map { sent in
                [
                    sent.uri, sent.headers.first(name: "beagle-platform") ?? "",
                    sent.headers.first(name: "accept-language") ?? "",
                ]
            }
            #expect(received == requests.map { [$0.path, $0.platform, $0.tenant] })
            // The proxy's own connections to the backend: one for fills and forwards alike, a second at most
            // should the backend's first close between requests.
            #expect(Set(proxy.origin.requests.map(\.connection)).count <= 2)
        }
    }

    @Test("HTTP/2: streams of one connection, fields repeated and changed, each reach the backend with their own")
    func streamsCarryTheirOwnFields() async throws {
        try await ProxyHarness.run { proxy in
            let client = try await RawConnection(port: proxy.server.publicPort)
            let platforms = ["IOS", "IOS", "ANDROID", "ANDROID", "IOS"]
            let streams = platforms.indices.map { UInt32(1 + 2 * $0) }
            var bytes = HTTP2Wire.connectionStart()
            for (stream, platform) in zip(streams, platforms) {
                var request = HTTP2Wire.request(
                    stream: stream,
                    path: "/screens/h2-\(stream)",
                    fields: [("beagle-platform", platform)]
                )
                bytes.writeBuffer(&request)
            }
            try await client.send(bytes)
            let answered = try await client.received { received in
                let frames = HTTP2Wire.frames(in: received)
                return streams.allSatisfy { stream in
                    frames.contains { $0.stream == stream && $0.flags & HTTP2Wire.endStream != 0 }
                }
            }
            let blocks = try HTTP2Wire.headerBlocks(in: HTTP2Wire.frames(in: answered))
            #expect(blocks.map { $0.headers.first(name: ":status") } == streams.map { _ in "200" })
            await client.close()
            let received = proxy.origin.requests.map { [$0.uri, $0.headers.first(name: "beagle-platform") ?? ""] }
            let expected = zip(streams, platforms).map { ["/screens/h2-\($0)", $1] }
            #expect(received.sorted { $0[0] < $1[0] } == expected.sorted { $0[0] < $1[0] })
        }
    }
}
