import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@testable import SDUIProxy

/// Responses compressed once, in brotli and gzip, and served by `Accept-Encoding`, over loopback.
@Suite("Compressed screens: stored once per coding, served by Accept-Encoding")
struct CompressionTests {
    /// A screen of a few kilobytes, as JSON compresses: well over `minBytes`, under the size compressed off the loop.
    static let screen: String = {
        let items = (0..<30).map { #"{"_beagleComponent_":"beagle:text","text":"item \#($0)"}"# }
        return #"{"_beagleComponent_":"beagle:screenComponent","child":{"children":["#
            + items.joined(separator: ",") + "]}}"
    }()

    private static func screenResponse(
        _ body: String = screen,
        type: String = "application/json"
    ) -> TestOrigin.Response {
        TestOrigin.Response(
            headers: [("Content-Type", type), ("Cache-Control", "max-age=60"), ("ETag", #""s1""#)],
            body: body
        )
    }

    /// A proxy that makes every coding when it stores a response (`compression.eager`): these tests are of the
    /// forms and how they are served; when a coding is made by default is `CompressionOnHitTests`'.
    private static func run(
        origin: @escaping TestOrigin.Responder,
        configure: ((inout ProxyConfiguration) -> Void)? = nil,
        _ body: (ProxyHarness) async throws -> Void
    ) async throws {
        try await ProxyHarness.run(
            origin: origin,
            configure: { configuration in
                configuration.compression.eager = true
                configure?(&configuration)
            },
            body
        )
    }

    /// Stores `path` with a first request, then waits for its coded forms.
    private static func storeAndCompress(_ path: String, _ proxy: ProxyHarness) async throws {
        _ = try await proxy.get(path)
        try await waitForCompression(proxy)
    }

    /// Waits until `count` stored responses have coded forms: they are compressed on the pool, after the miss.
    private static func waitForCompression(_ proxy: ProxyHarness, entries count: Int = 1) async throws {
        try await waitUntil {
            try await proxy.admin("/cache/stats").body.contains(#""compression":{"entries":\#(count),"#)
        }
    }

    private static func decoded(_ reply: ProxyHarness.Reply) throws -> String {
        guard let coding = reply["content-encoding"].flatMap(ContentCoding.init(token:)) else { return reply.body }
        return String(buffer: try ContentCoder.decode(reply.bytes, from: coding, maxBytes: 1 << 20))
    }

    @Test("one fill, asked for in identity; each client gets the form it accepts, each with its own length and tag")
    func formsByAcceptEncoding() async throws {
        try await Self.run(origin: { _ in Self.screenResponse() }) { proxy in
            let first = try await proxy.get("/screen")
            #expect(first["x-cache"] == "MISS" && first["content-encoding"] == nil && first.body == Self.screen)
            #expect(first["vary"] == "beagle-platform, Accept-Encoding")
            try await Self.waitForCompression(proxy)

            let cases: [(accept: String?, coding: String?)] = [
                ("gzip", "gzip"), ("br", "br"), ("gzip, deflate, br", "br"), ("br;q=0.5, gzip", "gzip"),
                ("gzip;q=0, br;q=0", nil), ("identity", nil), (nil, nil), ("*", "br"), ("deflate", nil),
            ]
            var lengths: [String: Int] = [:]
            for (accept, coding) in cases {
                let reply = try await proxy.get("/screen", headers: accept.map { [("Accept-Encoding", $0)] } ?? [])
                #expect(reply.status == .ok && reply["x-cache"] == "HIT", "\(accept ?? "none")")
                #expect(reply["content-encoding"] == coding, "\(accept ?? "none")")
                #expect(reply["content-length"] == String(reply.bytes.readableBytes))
                #expect(reply["etag"] == (coding.map { #""s1-\#($0)""# } ?? #""s1""#))
                #expect(reply["vary"] == "beagle-platform, Accept-Encoding")
                #expect(try Self.decoded(reply) == Self.screen)
                lengths[coding ?? "identity"] = reply.bytes.readableBytes
            }
            #expect(lengths["br"]! < Self.screen.utf8.count / 4 && lengths["gzip"]! < Self.screen.utf8.count / 4)
            #expect(proxy.origin.requests.count == 1)
            #expect(proxy.origin.requests.first?.headers.first(name: "accept-encoding") == "identity")
        }
    }

    @Test("If-None-Match matches the tag of the form asked for, not another form's; HEAD answers as GET")
    func validatorsPerForm() async throws {
        try await Self.run(origin: { _ in Self.screenResponse() }) { proxy in
            try await Self.storeAndCompress("/screen", proxy)
            let gzipTag = #""s1-gzip""#
            let notModified = try await proxy.get(
                "/screen",
                headers: [("Accept-Encoding", "gzip"), ("If-None-Match", gzipTag)]
            )
            #expect(notModified.status == .notModified && notModified["etag"] == gzipTag)
            #expect(notModified.bytes.readableBytes == 0)
            // Another form's tag, or identity's, is not this form's.
            for (accept, tag) in [("br", gzipTag), (nil, gzipTag), ("gzip", #""s1""#)] as [(String?, String)] {
                var headers = [("If-None-Match", tag)]
                if let accept { headers.append(("Accept-Encoding", accept)) }
                let reply = try await proxy.get("/screen", headers: headers)
                #expect(reply.status == .ok, "\(accept ?? "identity") with \(tag)")
                #expect(try Self.decoded(reply) == Self.screen)
            }
            let get = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip")])
            let head = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip")], method: .HEAD)
            #expect(head.status == .ok && head.bytes.readableBytes == 0)
            for name in ["content-encoding", "content-length", "etag", "vary", "content-type"] {
                #expect(head[name] == get[name], "\(name)")
            }
        }
    }

    @Test("a byte range is a range of the form asked for, its length that form's")
    func rangesPerForm() async throws {
        try await Self.run(origin: { _ in Self.screenResponse() }) { proxy in
            try await Self.storeAndCompress("/screen", proxy)
            let whole = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip")])
            let part = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")])
            #expect(part.status == .partialContent)
            #expect(part["content-range"] == "bytes 0-9/\(whole.bytes.readableBytes)")
            #expect(part["content-encoding"] == "gzip")
            #expect(part.bytes == whole.bytes.getSlice(at: whole.bytes.readerIndex, length: 10))
            // If-Range with the form's own tag serves the part; with identity's, the whole form.
            let matching = try await proxy.get(
                "/screen",
                headers: [("Accept-Encoding", "gzip"), ("Range", "bytes=0-9"), ("If-Range", #""s1-gzip""#)]
            )
            #expect(matching.status == .partialContent)
            let other = try await proxy.get(
                "/screen",
                headers: [("Accept-Encoding", "gzip"), ("Range", "bytes=0-9"), ("If-Range", #""s1""#)]
            )
            #expect(other.status == .ok && other.bytes == whole.bytes)
        }
    }

    @Test("compression off, a type not listed, or a body under minBytes: identity only, and Vary as before")
    func notCompressed() async throws {
        try await Self.run(
            origin: { request in
                switch request.uri {
                case "/image": Self.screenResponse(type: "image/png")
                case "/small": Self.screenResponse(#"{"_beagleComponent_":"beagle:text","text":"hi"}"#)
                default: Self.screenResponse()
                }
            },
            configure: { $0.compression.minBytes = 100 }
        ) { proxy in
            for path in ["/image", "/small"] {
                _ = try await proxy.get(path)
                let reply = try await proxy.get(path, headers: [("Accept-Encoding", "gzip, br")])
                #expect(reply["x-cache"] == "HIT" && reply["content-encoding"] == nil, "\(path)")
            }
            #expect(try await proxy.get("/image")["vary"] == "beagle-platform")
            // Under minBytes, but of a listed type: its Vary still names Accept-Encoding.
            #expect(try await proxy.get("/small")["vary"] == "beagle-platform, Accept-Encoding")
        }
        try await Self.run(
            origin: { _ in Self.screenResponse() },
            configure: { $0.compression.encodings = [] }
        ) { proxy in
            _ = try await proxy.get("/screen")
            let reply = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip, br")])
            #expect(reply["x-cache"] == "HIT" && reply["content-encoding"] == nil && reply.body == Self.screen)
            #expect(reply["vary"] == "beagle-platform")
        }
    }

    @Test("only gzip configured: a client asking for br and gzip gets gzip")
    func configuredCodingsOnly() async throws {
        try await Self.run(
            origin: { _ in Self.screenResponse() },
            configure: { $0.compression.encodings = [.gzip] }
        ) { proxy in
            try await Self.storeAndCompress("/screen", proxy)
            #expect(
                try await proxy.get("/screen", headers: [("Accept-Encoding", "br, gzip")])["content-encoding"] == "gzip"
            )
            #expect(try await proxy.get("/screen", headers: [("Accept-Encoding", "br")])["content-encoding"] == nil)
        }
    }

    @Test("the miss is answered in identity at once; the coded forms come from the pool, a large body's too")
    func compressedAfterTheMiss() async throws {
        let items = (0..<400).map { #"{"_beagleComponent_":"beagle:text","text":"line \#($0)"}"# }
        let large = #"{"_beagleComponent_":"beagle:screenComponent","children":["# + items.joined(separator: ",") + "]}"
        // Over the size a form keeps behind its head: kept in a buffer of its own.
        #expect(large.utf8.count > CachedResponse.maximumExactBodyBytes)
        try await Self.run(origin: { _ in Self.screenResponse(large) }) { proxy in
            let first = try await proxy.get("/large", headers: [("Accept-Encoding", "gzip")])
            #expect(first["x-cache"] == "MISS" && first["content-encoding"] == nil && first.body == large)
            try await Self.waitForCompression(proxy)
            let reply = try await proxy.get("/large", headers: [("Accept-Encoding", "gzip")])
            #expect(reply["x-cache"] == "HIT" && reply["content-encoding"] == "gzip")
            #expect(reply["etag"] == #""s1-gzip""#)
            #expect(try Self.decoded(reply) == large)
            #expect(proxy.origin.requests.count == 1)
        }
    }

    @Test(
        "a backend's gzip, deflate or br body, whatever its type, is decoded, stored as identity, and compressed again"
    )
    func backendCodingsDecoded() async throws {
        let text = String(repeating: "plain text from a backend that compresses anyway. ", count: 20)
        try await Self.run(
            origin: { request in
                let coding = ContentCoding(token: String(request.uri.dropFirst()))!
                let encoded = try! ContentCoder.encode(ByteBuffer(string: text), as: coding, level: 6)
                var response = TestOrigin.Response(
                    headers: [
                        ("Content-Type", "text/plain"), ("Cache-Control", "max-age=60"),
                        ("Content-Encoding", coding.rawValue), ("ETag", #""coded""#),
                    ]
                )
                response.rawBody = Array(encoded.readableBytesView)
                return response
            }
        ) { proxy in
            for (index, coding) in ["gzip", "deflate", "br"].enumerated() {
                let miss = try await proxy.get("/\(coding)")
                #expect(miss["content-encoding"] == nil && miss.body == text, "\(coding)")
                try await Self.waitForCompression(proxy, entries: index + 1)
                // The backend's tag named the coded bytes: the entry has its own.
                #expect(miss["etag"] != #""coded""#)
                let hit = try await proxy.get("/\(coding)")
                #expect(hit["x-cache"] == "HIT" && hit["content-encoding"] == nil && hit.body == text)
                let gzip = try await proxy.get("/\(coding)", headers: [("Accept-Encoding", "gzip")])
                #expect(try gzip["content-encoding"] == "gzip" && Self.decoded(gzip) == text)
            }
            #expect(proxy.origin.requests.count == 3)
        }
    }

    @Test("a coded body that does not decode is a 502 of kind decoding, never stored; an unknown coding passes")
    func undecodableBodies() async throws {
        try await Self.run(
            origin: { request in
                var response = TestOrigin.Response(
                    headers: [
                        ("Content-Type", "application/json"), ("Cache-Control", "max-age=60"),
                        ("Content-Encoding", request.uri == "/broken" ? "gzip" : "compress"),
                    ]
                )
                response.rawBody = [0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef]
                return response
            }
        ) { proxy in
            for _ in 0..<2 {
                let broken = try await proxy.get("/broken")
                #expect(broken.status == .badGateway)
                #expect(broken.body.contains(#""decoding""#))
                let unknown = try await proxy.get("/unknown")
                #expect(unknown.status == .ok && unknown["content-encoding"] == "compress")
                #expect(Array(unknown.bytes.readableBytesView) == [0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef])
            }
            #expect(proxy.origin.requests(to: "/broken").count == 2)
            #expect(proxy.origin.requests(to: "/unknown").count == 2)
        }
    }

    @Test("pass-through is never altered: a bypassed GET's and a POST's coded answers go as they came")
    func passThroughUntouched() async throws {
        let coded = try ContentCoder.encode(ByteBuffer(string: Self.screen), as: .gzip, level: 6)
        try await Self.run(
            origin: { _ in
                var response = TestOrigin.Response(
                    headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")]
                )
                response.rawBody = Array(coded.readableBytesView)
                return response
            },
            configure: { ProxyHarness.bypassingCache(under: "/live", in: &$0) }
        ) { proxy in
            for (path, method) in [("/live/feed", HTTPMethod.GET), ("/api/orders", .POST)] {
                let reply = try await proxy.get(
                    path,
                    headers: [("Accept-Encoding", "gzip")],
                    method: method,
                    body: method == .POST ? "{}" : nil
                )
                #expect(reply["content-encoding"] == "gzip" && reply.bytes == coded, "\(method) \(path)")
                #expect(reply["vary"] == nil)
            }
            // The client's Accept-Encoding went to the backend as it was.
            #expect(proxy.origin.requests.allSatisfy { $0.headers.first(name: "accept-encoding") == "gzip" })
        }
    }

    @Test("a 304 from the backend keeps the stored forms, not compressed again")
    func revalidationKeepsForms() async throws {
        try await Self.run(
            origin: { request in
                guard request.headers.first(name: "if-none-match") == #""s1""# else {
                    return TestOrigin.Response(
                        headers: [
                            ("Content-Type", "application/json"), ("Cache-Control", "no-cache"), ("ETag", #""s1""#),
                        ],
                        body: Self.screen
                    )
                }
                return TestOrigin.Response(
                    status: .notModified,
                    headers: [("Cache-Control", "no-cache"), ("ETag", #""s1""#)]
                )
            }
        ) { proxy in
            try await Self.storeAndCompress("/screen", proxy)
            let revalidated = try await proxy.get("/screen", headers: [("Accept-Encoding", "br")])
            #expect(revalidated["x-cache"] == "REVALIDATED" && revalidated["content-encoding"] == "br")
            #expect(try Self.decoded(revalidated) == Self.screen)
            #expect(proxy.origin.requests.count == 2)
            // The first store compressed once per coding; the refreshed entry took its forms over.
            let metrics = try await proxy.admin("/metrics")
            #expect(metrics.body.contains(#"sdui_compressions_total{coding="br",result="kept"} 1"#))
        }
    }

    @Test("stats and metrics count the bytes stored and sent in each form, and the bytes saved")
    func countedInStatsAndMetrics() async throws {
        try await Self.run(origin: { _ in Self.screenResponse() }) { proxy in
            try await Self.storeAndCompress("/screen", proxy)
            let gzip = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip")])
            _ = try await proxy.get("/screen", headers: [("Accept-Encoding", "br")])
            let identityLength = Self.screen.utf8.count
            let stats = try await proxy.admin("/cache/stats")
            #expect(stats.body.contains(#""compression":{"entries":1,"bodyBytes":{"identity":\#(identityLength),"#))
            #expect(stats.body.contains(#""gzip":\#(gzip.bytes.readableBytes)"#))
            #expect(stats.body.contains(#""sent":{"identity":1,"br":1,"gzip":1}"#))
            let metrics = try await proxy.admin("/metrics")
            #expect(metrics.body.contains(#"sdui_cache_body_bytes{encoding="gzip"} \#(gzip.bytes.readableBytes)"#))
            #expect(metrics.body.contains(#"sdui_cache_responses_by_encoding_total{encoding="br"} 1"#))
            #expect(metrics.body.contains(#"sdui_compressions_total{coding="gzip",result="kept"} 1"#))
            #expect(metrics.body.contains("sdui_compression_saved_bytes_total "))
        }
    }

    @Test("Beagle 1.x: the beagle-hash of the content validates in every form")
    func beagleHashPerForm() async throws {
        try await Self.run(
            origin: { _ in Self.screenResponse() },
            configure: { $0.compat.beagleHash = true }
        ) { proxy in
            let identity = try await proxy.get("/screen")
            let hash = try #require(identity["beagle-hash"])
            try await Self.waitForCompression(proxy)
            let gzip = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip")])
            #expect(gzip["beagle-hash"] == hash && gzip["content-encoding"] == "gzip")
            let again = try await proxy.get("/screen", headers: [("Accept-Encoding", "gzip"), ("beagle-hash", hash)])
            #expect(again.status == .notModified)
        }
    }
}
