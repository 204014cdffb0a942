import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

/// An entry kept in several forms: identity and content codings, each with its own head lines, length and tag,
/// and every other field the same.
@Suite struct StoredFormTests {
    private let body = ByteBuffer(string: #"{"_beagleComponent_":"beagle:text","text":"a screen"}"#)
    /// Stand-ins for coded bodies: the entry keeps whatever bytes it is given for a coding.
    private let brotli = ByteBuffer(string: "br-bytes")
    private let gzip = ByteBuffer(string: "gzip-bytes!")

    private func entry(
        _ headers: [(String, String)] = [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")],
        encoded: [CachedResponse.EncodedBody]? = nil,
        variesByEncoding: Bool = true,
        pending: ContentNegotiation.Codings = [],
        status: HTTPResponseStatus = .ok
    ) -> CachedResponse {
        var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        metadata.variesByEncoding = variesByEncoding
        metadata.pendingCodings = pending
        metadata.clientFields = ClientFacingFields(keyFields: ["beagle-platform"])
        return CachedResponse(
            status: status,
            headers: HTTPHeaders(headers),
            body: body,
            metadata: metadata,
            encodedBodies: encoded ?? [.init(coding: .br, body: brotli), .init(coding: .gzip, body: gzip)]
        )
    }

    private func head(_ entry: CachedResponse, _ coding: ContentCoding? = nil) -> String {
        String(decoding: entry.encodedHead(coding), as: UTF8.self)
    }

    @Test("each form's head is the shared lines, then its own coding and tag, this hop's Via and its length")
    func headsPerForm() {
        let stored = entry([("Content-Type", "application/json"), ("ETag", #""v1""#), ("Vary", "Accept-Language")])
        let shared =
            "Content-Type: application/json\r\n"
            + "Vary: Accept-Language, beagle-platform, Accept-Encoding\r\n"
        #expect(
            head(stored)
                == shared + "ETag: \"v1\"\r\nVia: 1.1 sdui-proxy\r\nContent-Length: \(body.readableBytes)\r\n"
        )
        #expect(
            head(stored, .gzip)
                == shared + "Content-Encoding: gzip\r\nETag: \"v1-gzip\"\r\n"
                + "Via: 1.1 sdui-proxy\r\nContent-Length: \(gzip.readableBytes)\r\n"
        )
        #expect(
            head(stored, .br)
                == shared + "Content-Encoding: br\r\nETag: \"v1-br\"\r\n"
                + "Via: 1.1 sdui-proxy\r\nContent-Length: \(brotli.readableBytes)\r\n"
        )
        #expect(head(stored).contains("\r\nVia: \(CachedResponse.ownVia)\r\n"))
        // The lines other entries may carry alike are in the entry's common block, the form's own in the form; a
        // hit writes `Via` and the length.
        #expect(String(decoding: stored.commonLines.lines, as: UTF8.self) == shared)
        #expect(String(decoding: stored.identity.storedLines, as: UTF8.self) == "ETag: \"v1\"\r\n")
        #expect(stored.form(.gzip).body == gzip && stored.form(.br).body == brotli && stored.identity.body == body)
        #expect(stored.form(.gzip).etag == #""v1-gzip""# && stored.etag == #""v1""#)
        #expect(stored.codings == [.br, .gzip])
        // A coding the entry is not kept in is identity.
        #expect(entry(encoded: [.init(coding: .gzip, body: gzip)]).form(.br).coding == nil)
    }

    @Test("a computed tag is derived for each form alike, and a weak backend tag stays weak in each")
    func derivedTags() {
        let computed = entry()
        #expect(computed.upstreamETag == nil)
        #expect(computed.form(.gzip).etag == ContentNegotiation.etag(computed.etag, for: .gzip))
        let weak = entry([("ETag", #"W/"w""#)])
        #expect(weak.form(.br).etag == #"W/"w-br""#)
        #expect(weak.upstreamETag == #"W/"w""#)
    }

    @Test("the backend's Content-Encoding is never among the shared lines, nor a second ETag")
    func codingNotShared() {
        let stored = entry([("Content-Encoding", "gzip"), ("ETag", #""a""#), ("ETag", #""b""#)], encoded: [])
        #expect(!head(stored).lowercased().contains("content-encoding"))
        #expect(stored.headers[canonicalForm: "etag"] == [#""a""#])
    }

    @Test("Vary names Accept-Encoding when the response may be kept compressed, merged with the backend's")
    func varyByEncoding() {
        #expect(entry(encoded: []).headers.first(name: "vary") == "beagle-platform, Accept-Encoding")
        #expect(
            entry([("Vary", "accept-encoding")], encoded: []).headers.first(name: "vary")
                == "accept-encoding, beagle-platform"
        )
        #expect(entry(encoded: [], variesByEncoding: false).headers.first(name: "vary") == "beagle-platform")
        // `*` already says every field may select the answer.
        #expect(entry([("Vary", "*")], encoded: []).headers[canonicalForm: "vary"] == ["*"])
    }

    @Test("a form is kept once per coding, and deflate is not a stored coding")
    func oneFormPerCoding() {
        let stored = entry(encoded: [
            .init(coding: .gzip, body: gzip), .init(coding: .gzip, body: brotli), .init(coding: .deflate, body: gzip),
        ])
        #expect(stored.encodedForms.map(\.coding) == [.gzip])
        #expect(stored.form(.gzip).body == gzip)
        #expect(stored.codings == .gzip)
    }

    @Test("forms added later share the identity form and the rest, and cost what they hold")
    func addingForms() {
        let plain = entry(encoded: [])
        #expect(plain.encodedForms.isEmpty && plain.codings.isEmpty)
        let compressed = plain.adding([.init(coding: .gzip, body: gzip)])
        #expect(compressed.codings == .gzip)
        #expect(head(compressed) == head(plain))
        let sameArray =
            compressed.identity.storedLines.withUnsafeBufferPointer { $0.baseAddress }
            == plain.identity.storedLines.withUnsafeBufferPointer { $0.baseAddress }
        #expect(sameArray)
        #expect(
            compressed.byteCost - plain.byteCost == compressed.form(.gzip).storedLines.count + gzip.readableBytes
                + MemoryLayout<StoredForm>.size
        )
        #expect(head(compressed, .gzip).hasPrefix("Content-Type: application/json\r\n"))
        #expect(compressed.form(.gzip).etag == ContentNegotiation.etag(plain.etag, for: .gzip))
        #expect(compressed.isFresh(at: .now()) && compressed.tags == plain.tags && compressed.status == plain.status)
        // Adding a coding again replaces its form.
        let again = compressed.adding([.init(coding: .gzip, body: brotli), .init(coding: .br, body: brotli)])
        #expect(again.form(.gzip).body == brotli && again.codings == [.br, .gzip])
    }

    @Test("the codings still to be made: those kept are not pending, nor those tried, and a soft purge keeps them")
    func pendingCodings() {
        // Made with gzip: only br is still to be made.
        let gzipKept = entry(encoded: [.init(coding: .gzip, body: gzip)], pending: [.br, .gzip])
        #expect(gzipKept.codings == .gzip && gzipKept.pendingCodings == .br)
        #expect(entry(pending: [.br, .gzip]).pendingCodings.isEmpty)
        let plain = entry(encoded: [], pending: [.br, .gzip])
        #expect(plain.pendingCodings == [.br, .gzip])
        // A coding tried is no longer pending, kept or not; one not tried still is.
        let tried = plain.adding([], tried: .gzip)
        #expect(tried.codings.isEmpty && tried.pendingCodings == .br)
        let added = tried.adding([.init(coding: .br, body: brotli)], tried: .br)
        #expect(added.codings == .br && added.pendingCodings.isEmpty)
        #expect(plain.adding([.init(coding: .gzip, body: gzip)]).pendingCodings == .br)
        #expect(plain.softPurged(at: .now())?.pendingCodings == [.br, .gzip])
    }

    @Test("a request is sent the kept coding it prefers; one it would rather have, still to be made, is asked for")
    func negotiation() {
        let plain = entry(encoded: [], pending: [.br, .gzip])
        #expect(plain.negotiate(acceptEncoding: nil) == (nil, nil))
        #expect(plain.negotiate(acceptEncoding: "identity") == (nil, nil))
        #expect(plain.negotiate(acceptEncoding: "zstd") == (nil, nil))
        #expect(plain.negotiate(acceptEncoding: "gzip") == (nil, .gzip))
        #expect(plain.negotiate(acceptEncoding: "gzip, deflate, br") == (nil, .br))
        let gzipKept = entry(encoded: [.init(coding: .gzip, body: gzip)], pending: [.br, .gzip])
        #expect(gzipKept.negotiate(acceptEncoding: "gzip") == (.gzip, nil))
        // Prefers br, not made yet: sent gzip meanwhile, and br asked for.
        #expect(gzipKept.negotiate(acceptEncoding: "br, gzip") == (.gzip, .br))
        #expect(gzipKept.negotiate(acceptEncoding: "br;q=0.5, gzip") == (.gzip, nil))
        #expect(gzipKept.negotiate(acceptEncoding: "br") == (nil, .br))
        // Kept in both, or nothing pending: the kept forms alone decide.
        #expect(entry().negotiate(acceptEncoding: "br, gzip") == (.br, nil))
        #expect(entry(encoded: []).negotiate(acceptEncoding: "br, gzip") == (nil, nil))
        #expect(
            entry(encoded: [.init(coding: .gzip, body: gzip)]).negotiate(acceptEncoding: "br, gzip") == (.gzip, nil)
        )
    }

    @Test("a soft purge keeps every form")
    func softPurgeKeepsForms() {
        let stored = entry()
        let purged = stored.softPurged(at: .now())
        #expect(purged?.codings == [.br, .gzip])
        #expect(purged.map { head($0, .gzip) } == head(stored, .gzip))
        #expect(purged?.byteCost == stored.byteCost)
    }

    @Test("a form's fields read back from its head, its own lines included")
    func fieldsOfAForm() {
        var fields: [String] = []
        let stored = entry()
        stored.form(.br).forEachField(common: stored.commonLines) { name, value in
            fields.append(String(decoding: name, as: UTF8.self) + "=" + String(decoding: value, as: UTF8.self))
        }
        #expect(fields.contains("Content-Encoding=br"))
        #expect(fields.contains("Content-Length=\(brotli.readableBytes)"))
        #expect(fields.first == "Content-Type=application/json")
    }

    @Test("a large coded body stays in its buffer; a small one is kept exact behind its head")
    func largeCodedBody() {
        let large = ByteBuffer(repeating: 7, count: CachedResponse.maximumExactBodyBytes + 1)
        let stored = entry(encoded: [.init(coding: .gzip, body: large), .init(coding: .br, body: brotli)])
        #expect(stored.form(.gzip).largeBody == large)
        #expect(stored.form(.br).largeBody == nil)
        var exact: [UInt8]?
        stored.form(.br).withEncodedBytes { _, body in exact = body.map(Array.init) }
        #expect(exact == Array(brotli.readableBytesView))
    }

    @Test("a 200 serves ranges, which its head writer says; a response other than 200 serves none in any form")
    func noRangesOnOtherStatuses() {
        #expect(entry(status: .ok).advertisesRanges)
        let stored = entry(status: .notFound)
        #expect(!stored.advertisesRanges)
        #expect(!head(stored, .gzip).contains("Accept-Ranges"))
    }
}
