import Foundation
import SDUIProxyCore
import Testing

/// One case of the rules every Beagle client's URL builder follows: a base (or none) and a path, and the URL they
/// build (or nil when none can be built).
struct URLBuilderCase: Sendable, CustomTestStringConvertible {
    var base: String?
    var path: String
    var expected: String?

    init(_ base: String?, _ path: String, _ expected: String?) {
        self.base = base
        self.path = path
        self.expected = expected
    }

    var testDescription: String { "\(base ?? "nil") + \"\(path)\"" }

    /// Each kind of base with each kind of path, then the encoding rules.
    static let all: [URLBuilderCase] = [
        // A base without a path: relative paths (`/` and `//` included) are appended, others stand alone.
        URLBuilderCase("https://api.example.com", "/screens/home", "https://api.example.com/screens/home"),
        URLBuilderCase("https://api.example.com", "screens/home", "screens/home"),
        URLBuilderCase("https://api.example.com", "//cdn/asset", "https://api.example.com//cdn/asset"),
        URLBuilderCase("https://api.example.com", "/", "https://api.example.com/"),
        URLBuilderCase("https://api.example.com", "", nil),
        // A base ending with a slash: that one slash is dropped before appending.
        URLBuilderCase("https://api.example.com/", "/screens/home", "https://api.example.com/screens/home"),
        URLBuilderCase("https://api.example.com/", "screens/home", "screens/home"),
        URLBuilderCase("https://api.example.com/", "//cdn/asset", "https://api.example.com//cdn/asset"),
        URLBuilderCase("https://api.example.com/", "/", "https://api.example.com/"),
        URLBuilderCase("https://api.example.com/", "", nil),
        // A base with a path of its own keeps it.
        URLBuilderCase("https://api.example.com/v2", "/screens/home", "https://api.example.com/v2/screens/home"),
        URLBuilderCase("https://api.example.com/v2", "screens/home", "screens/home"),
        URLBuilderCase("https://api.example.com/v2", "//cdn/asset", "https://api.example.com/v2//cdn/asset"),
        URLBuilderCase("https://api.example.com/v2", "/", "https://api.example.com/v2/"),
        URLBuilderCase("https://api.example.com/v2", "", nil),
        // No base: paths stand as they are.
        URLBuilderCase(nil, "/screens/home", "/screens/home"),
        URLBuilderCase(nil, "screens/home", "screens/home"),
        URLBuilderCase(nil, "//cdn/asset", "//cdn/asset"),
        URLBuilderCase(nil, "/", "/"),
        URLBuilderCase(nil, "", nil),
        // Spaces are encoded; a path with a % is taken as encoded already; + and # stay.
        URLBuilderCase(
            "https://api.example.com",
            "/users/Ana Maria Souza",
            "https://api.example.com/users/Ana%20Maria%20Souza"
        ),
        URLBuilderCase(
            "https://api.example.com",
            "/files/report%2520final",
            "https://api.example.com/files/report%2520final"
        ),
        URLBuilderCase("https://api.example.com", "/search/shoes+socks", "https://api.example.com/search/shoes+socks"),
        URLBuilderCase("https://api.example.com", "/tags/new #sale", "https://api.example.com/tags/new%20#sale"),
        // Non-ASCII characters are encoded as their UTF-8 bytes.
        URLBuilderCase(
            "https://img.example.com",
            "/fotos/Praia de Itacaré ao pôr do sol.jpg",
            "https://img.example.com/fotos/Praia%20de%20Itacar%C3%A9%20ao%20p%C3%B4r%20do%20sol.jpg"
        ),
        // A base without a scheme is still a base; the encoded path is appended as it is.
        URLBuilderCase(
            "img.example.com",
            "/fotos/Praia%20de%20Itacar%C3%A9.jpg",
            "img.example.com/fotos/Praia%20de%20Itacar%C3%A9.jpg"
        ),
        // An absolute URL without a base stays, query and all.
        URLBuilderCase(
            nil,
            "https://www.example.com/search?&q=swift+nio&hl=pt-BR&ref=0aB_c-9",
            "https://www.example.com/search?&q=swift+nio&hl=pt-BR&ref=0aB_c-9"
        ),
    ]
}

@Suite("BeagleURLBuilder")
struct BeagleURLBuilderTests {
    @Test("builds what Beagle's URL rules say", arguments: URLBuilderCase.all)
    func ruleCase(_ testCase: URLBuilderCase) {
        #expect(BeagleURLBuilder.build(base: testCase.base, path: testCase.path) == testCase.expected)
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
