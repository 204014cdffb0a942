import NIOCore
import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("What clients see of an answer's Vary and tag field")
struct ClientFacingFieldsTests {
    @Test("Vary names the backend's fields as sent, then each key field it did not name, once whatever its case")
    func varyMerging() {
        let fields = ClientFacingFields(keyFields: ["beagle-platform", "accept-language"])
        #expect(fields.vary(merging: []) == "beagle-platform, accept-language")
        #expect(fields.vary(merging: ["Accept-Encoding"]) == "Accept-Encoding, beagle-platform, accept-language")
        #expect(
            fields.vary(merging: ["Beagle-Platform", "accept-encoding", "ACCEPT-ENCODING"])
                == "Beagle-Platform, accept-encoding, accept-language"
        )
        // `*` already says that anything may select the answer.
        #expect(fields.vary(merging: ["*"]) == nil)
        // An answer keyed on no request field keeps the backend's Vary as it is.
        #expect(ClientFacingFields(hiddenField: "Surrogate-Key").vary(merging: ["Origin"]) == nil)
    }

    @Test("without key fields, Vary names Accept-Encoding alone for a body kept compressed, and nothing else")
    func noKeyFields() {
        let fields = ClientFacingFields()
        #expect(fields.vary(merging: [], namingAcceptEncoding: true) == "Accept-Encoding")
        #expect(fields.vary(merging: []) == nil)
        #expect(
            fields.vary(merging: ["Accept-Language"], namingAcceptEncoding: true) == "Accept-Language, Accept-Encoding"
        )
    }

    @Test("the key's fields are the platform header, then the route's vary headers not already named")
    func keyFieldsOfRoute() {
        var configuration = ProxyConfiguration()
        configuration.cache.policy.vary = ["accept-language", "beagle-platform"]
        let keyed = ClientFacingFields(configuration, policy: configuration.cache.policy)
        #expect(keyed.keyFields == ["beagle-platform", "accept-language"])
        #expect(keyed.hiddenField == "surrogate-key")
        // A bypassed answer is keyed on nothing; exposed tags are not hidden.
        configuration.cache.exposeTags = true
        let bypassed = ClientFacingFields(configuration, policy: nil)
        #expect(bypassed.keyFields.isEmpty && bypassed.hiddenField == nil && bypassed.changesNothing)
    }

    @Test("an answer passed on loses the hidden field and gets one merged Vary")
    func applyToPassedOnHeaders() {
        var headers: HTTPHeaders = [
            "Content-Type": "application/json", "surrogate-KEY": "a b", "Vary": "Origin", "vary": "Accept-Encoding",
        ]
        ClientFacingFields(keyFields: ["beagle-platform"], hiddenField: "Surrogate-Key").apply(to: &headers)
        #expect(!headers.contains(name: "surrogate-key"))
        #expect(headers["vary"] == ["Origin, Accept-Encoding, beagle-platform"])
        #expect(headers["content-type"] == ["application/json"])
    }

    @Test("a stored head names the key's fields in one Vary and leaves the tag field out, its tags still kept")
    func storedHead() {
        var metadata = CachedResponse.Metadata(storedAt: .now(), initialAge: 0, freshnessLifetime: 60)
        metadata.clientFields = ClientFacingFields(keyFields: ["beagle-platform"], hiddenField: "surrogate-key")
        let entry = CachedResponse(
            status: .ok,
            headers: [
                "Content-Type": "application/json", "Vary": "Accept-Encoding", "Surrogate-Key": "home all",
                "ETag": #""v1""#,
            ],
            body: ByteBuffer(string: "{}"),
            metadata: metadata
        )
        #expect(
            String(decoding: entry.encodedHead(), as: UTF8.self)
                == "Content-Type: application/json\r\n"
                + "Vary: Accept-Encoding, beagle-platform\r\nETag: \"v1\"\r\nVia: 1.1 sdui-proxy\r\n"
                + "Content-Length: 2\r\n"
        )
        #expect(entry.tags == ["home", "all"])
        #expect(entry.headers["vary"] == ["Accept-Encoding, beagle-platform"])
    }

    @Test("the hidden field is found by name in any letter case; names of its length, alike or not, are not it")
    func hidesByName() {
        func hides(_ fields: ClientFacingFields, _ name: String) -> Bool {
            Array(name.utf8).withUnsafeBytes { fields.hides($0) }
        }
        let long = ClientFacingFields(hiddenField: "Surrogate-Key")
        #expect(long.hiddenFieldLead != nil)
        for name in ["surrogate-key", "SURROGATE-KEY", "Surrogate-Key"] { #expect(hides(long, name), "\(name)") }
        for name in ["Last-Modified", "Accept-Ranges", "Surrogate-Kez", "xurrogate-key", "Surrogate-Ke", "Surrogate"] {
            #expect(!hides(long, name), "\(name)")
        }
        // Shorter than eight bytes: compared whole.
        let short = ClientFacingFields(hiddenField: "X-Tags")
        #expect(short.hiddenFieldLead == nil)
        #expect(hides(short, "x-TAGS") && !hides(short, "x-tagz") && !hides(short, "X-Tag"))
        #expect(!hides(ClientFacingFields(), "X-Tags"))
    }
}
