import SDUIProxyCore
import Testing

/// RFC 9110 section 12.5.3: which stored form a request's `Accept-Encoding` gets, and each form's entity tag.
@Suite struct ContentNegotiationTests {
    private let both: ContentNegotiation.Codings = [.br, .gzip]

    private func chosen(_ field: String?, among available: ContentNegotiation.Codings? = nil) -> String {
        ContentNegotiation.coding(forAcceptEncoding: field, available: available ?? both)?.rawValue ?? "identity"
    }

    @Test("no field, an empty one, or one naming only identity gets identity")
    func identityWhenNotAsked() {
        #expect(chosen(nil) == "identity")
        #expect(chosen("") == "identity")
        #expect(chosen("identity") == "identity")
        #expect(chosen("  ,  ") == "identity")
        #expect(chosen("compress, zstd") == "identity")
    }

    @Test("brotli goes before gzip at equal weight, and either goes before identity")
    func preferenceAtEqualWeight() {
        #expect(chosen("gzip, deflate, br") == "br")
        #expect(chosen("br;q=0.8, gzip;q=0.8") == "br")
        #expect(chosen("gzip") == "gzip")
        #expect(chosen("gzip, br", among: .gzip) == "gzip")
        #expect(chosen("br", among: .gzip) == "identity")
        #expect(chosen("gzip, identity") == "gzip")
        #expect(chosen("gzip, br", among: []) == "identity")
    }

    @Test("weights decide: the highest wins, q=0 refuses, and identity unnamed is the least acceptable")
    func weights() {
        #expect(chosen("br;q=0.5, gzip") == "gzip")
        #expect(chosen("br;q=0.5, gzip;q=0.9") == "gzip")
        #expect(chosen("gzip;q=0, br") == "br")
        #expect(chosen("gzip;q=0", among: .gzip) == "identity")
        #expect(chosen("br;q=0, gzip;q=0") == "identity")
        #expect(chosen("gzip;q=0.001") == "gzip")
        #expect(chosen("gzip;q=0.5, identity") == "identity")
        #expect(chosen("gzip;q=0.5, identity;q=0.5") == "gzip")
        #expect(chosen("gzip;q=0.5, identity;q=0.6") == "identity")
        #expect(chosen("gzip;Q=1.000") == "gzip")
        #expect(chosen("GZIP ; q=1") == "gzip")
        #expect(chosen("x-gzip") == "gzip")
    }

    @Test("* stands for every coding the field does not name, identity included")
    func wildcard() {
        #expect(chosen("*") == "br")
        #expect(chosen("*, br;q=0") == "gzip")
        #expect(chosen("*;q=0") == "identity")
        #expect(chosen("*;q=0.3, identity;q=0.5") == "identity")
        #expect(chosen("identity;q=0, *;q=0.1") == "br")
    }

    @Test("identity is sent when nothing acceptable is available, even when the field refuses it")
    func identityAsLastResort() {
        #expect(chosen("identity;q=0, br;q=0") == "identity")
        #expect(chosen("br", among: .gzip) == "identity")
        #expect(chosen("identity;q=0", among: .gzip) == "identity")
    }

    @Test("a member whose weight does not parse is left out; the others count")
    func malformedWeights() {
        #expect(chosen("br;q=2, gzip") == "gzip")
        #expect(chosen("br;q=0.5.1, gzip;q=0.1") == "gzip")
        #expect(chosen("br;q=, gzip;q=0.1") == "gzip")
        #expect(chosen("br;level=1") == "identity")
        #expect(chosen("br;q=0.12345") == "identity")
        #expect(chosen("br;q=1.5") == "identity")
        #expect(chosen(";q=1, gzip") == "gzip")
        #expect(chosen("\n, gzip;q=0") == "identity")
    }

    @Test("each form's tag is the identity tag with its coding inside the quotes, weak or strong")
    func variantTags() {
        #expect(ContentNegotiation.etag(#""abc""#, for: .gzip) == #""abc-gzip""#)
        #expect(ContentNegotiation.etag(#""abc""#, for: .br) == #""abc-br""#)
        #expect(ContentNegotiation.etag(#"W/"abc""#, for: .gzip) == #"W/"abc-gzip""#)
        #expect(ContentNegotiation.etag(#""""#, for: .br) == #""-br""#)
        // Not a quoted tag: the forms still differ.
        #expect(ContentNegotiation.etag("abc", for: .gzip) == "abc-gzip")
        #expect(ContentNegotiation.etag(#""abc""#, for: .gzip) != ContentNegotiation.etag(#""abc""#, for: .br))
    }
}
