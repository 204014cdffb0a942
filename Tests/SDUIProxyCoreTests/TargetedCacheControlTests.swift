import NIOHTTP1
import SDUIProxyCore
import Testing

/// Targeted cache-control fields (RFC 9213) read as Structured Field Dictionaries (RFC 9651): a valid field is
/// read whole, anything else ignored whole.
@Suite struct TargetedCacheControlTests {
    private static func directives(
        _ lines: [(String, String)],
        fields: [String] = ["cdn-cache-control"]
    )
        -> CacheControl?
    {
        TargetedCacheControl.directives(in: HTTPFieldLines(HTTPHeaders(lines)), fieldNames: fields)
    }

    @Test("RFC 9213 §2.1: integers, booleans and strings of the types RFC 9651 gives them")
    func validField() throws {
        let read = try #require(
            Self.directives([
                ("CDN-Cache-Control", "max-age=600, s-maxage=60, stale-while-revalidate=5, stale-if-error=7"),
                ("CDN-Cache-Control", "must-revalidate, public, no-cache=\"set-cookie\", private=?0, x-other=(a b)"),
            ])
        )
        #expect(read.isTargeted)
        #expect(read.maxAge == 600)
        #expect(read.sharedMaxAge == 60)
        #expect(read.staleWhileRevalidate == 5)
        #expect(read.staleIfError == 7)
        #expect(read.mustRevalidate && read.isPublic && read.noCache)
        #expect(!read.isPrivate, "private=?0 is false")
        #expect(!read.noStore)
    }

    @Test(
        "RFC 9213 §2.1: a field that does not parse, or gives a known directive the wrong type, is ignored whole",
        arguments: [
            "max-age =100", "max-age=\"10\"", "MaX-aGe=10", "max-age=10.5", "max-age=-1", "no-store=1",
            "no-store=\"yes\"", "private=10", "max-age=(1 2)", "max-age=10,", "max-age=10;;",
        ]
    )
    func invalidField(value: String) {
        #expect(Self.directives([("CDN-Cache-Control", value)]) == nil, "\(value)")
    }

    @Test("the first configured field present and valid wins; an invalid one yields to the next")
    func precedence() throws {
        let lines = [("CDN-Cache-Control", "max-age=\"1\""), ("Proxy-Cache-Control", "max-age=5")]
        let fallback = try #require(Self.directives(lines, fields: ["cdn-cache-control", "proxy-cache-control"]))
        #expect(fallback.maxAge == 5)
        let valid = [("CDN-Cache-Control", "max-age=9"), ("Proxy-Cache-Control", "max-age=5")]
        #expect(Self.directives(valid, fields: ["cdn-cache-control", "proxy-cache-control"])?.maxAge == 9)
        #expect(Self.directives([("Cache-Control", "max-age=5")]) == nil)
    }

    @Test("StorageRules: a valid targeted field decides, else Cache-Control; none configured reads Cache-Control")
    func storageRulesChoose() {
        let fields = HTTPFieldLines(["Cache-Control": "no-store", "CDN-Cache-Control": "max-age=600"])
        #expect(StorageRules().directives(of: fields).maxAge == 600)
        #expect(!StorageRules().directives(of: fields).noStore)
        var cacheControlOnly = StorageRules()
        cacheControlOnly.targetedFields = []
        #expect(cacheControlOnly.directives(of: fields).noStore)
        #expect(!cacheControlOnly.directives(of: fields).isTargeted)
    }
}
