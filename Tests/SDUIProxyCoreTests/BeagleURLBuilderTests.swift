import Foundation
import SDUIProxyCore
import Testing

/// One case of Beagle's shared URL-building test data.
struct URLBuilderCase: Decodable, Sendable, CustomTestStringConvertible {
    var base: String?
    var path: String
    var result: String?

    var testDescription: String { "\(base ?? "nil") + \"\(path)\"" }

    static func all() throws -> [URLBuilderCase] {
        try JSONDecoder().decode([URLBuilderCase].self, from: Fixtures.data("UrlBuilderTestSpec.json"))
    }
}

@Suite("BeagleURLBuilder")
struct BeagleURLBuilderTests {
    @Test("builds what Beagle's shared test data says", arguments: try URLBuilderCase.all())
    func specCase(_ testCase: URLBuilderCase) {
        #expect(BeagleURLBuilder.build(base: testCase.base, path: testCase.path) == testCase.result)
    }

    @Test("the shared test data has all 27 cases, nil bases and nil results included")
    func specIsComplete() throws {
        let cases = try URLBuilderCase.all()
        #expect(cases.count == 27)
        #expect(cases.filter { $0.base == nil }.count == 6)
        #expect(cases.filter { $0.result == nil }.count == 4)
    }

    @Test("an empty path builds nothing, with or without a base")
    func emptyPath() {
        #expect(BeagleURLBuilder.build(base: "http://b", path: "") == nil)
        #expect(BeagleURLBuilder.build(base: nil, path: "") == nil)
    }

    @Test("an empty base counts as no base")
    func emptyBase() {
        #expect(BeagleURLBuilder.build(base: "", path: "/a") == "/a")
    }

    @Test("only one trailing slash of the base is dropped")
    func trailingSlashes() {
        #expect(BeagleURLBuilder.build(base: "http://b/x/", path: "/a") == "http://b/x/a")
        #expect(BeagleURLBuilder.build(base: "http://b/x//", path: "/a") == "http://b/x//a")
    }

    @Test("a path without % is encoded: space, quote, braces, pipe, non-ASCII; reserved characters stay")
    func encodesUnencodedPaths() {
        #expect(BeagleURLBuilder.build(base: nil, path: "/a b\"{c}|d") == "/a%20b%22%7Bc%7D%7Cd")
        #expect(BeagleURLBuilder.build(base: nil, path: "/ü") == "/%C3%BC")
        #expect(
            BeagleURLBuilder.build(base: nil, path: "/-._~:/?#[]@!$&'()*+,;=")
                == "/-._~:/?#[]@!$&'()*+,;="
        )
    }

    @Test("a path with % is taken as encoded; if it still holds bad characters it builds nothing")
    func encodedPathsAreNotEncodedAgain() {
        #expect(BeagleURLBuilder.build(base: "http://b", path: "/a%2Fb") == "http://b/a%2Fb")
        #expect(BeagleURLBuilder.build(base: "http://b", path: "/a%20b c") == nil)
        #expect(BeagleURLBuilder.build(base: "http://b", path: "/100%") == nil)
        #expect(BeagleURLBuilder.build(base: "http://b", path: "/%zz") == nil)
    }

    @Test("absolute URLs ignore the base and are encoded like paths")
    func absoluteURLs() {
        #expect(BeagleURLBuilder.build(base: "http://b/x", path: "https://c/d e") == "https://c/d%20e")
        #expect(BeagleURLBuilder.build(base: "http://b/x", path: "beagle://screen") == "beagle://screen")
    }

    @Test("a base that is not a valid URI reference builds nothing for relative paths")
    func invalidBase() {
        #expect(BeagleURLBuilder.build(base: "http://b/a b", path: "/c") == nil)
        #expect(BeagleURLBuilder.build(base: "http://b/a b", path: "https://c/") == "https://c/")
    }
}
