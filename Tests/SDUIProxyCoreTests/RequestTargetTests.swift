import Testing

@testable import SDUIProxyCore

@Suite("Request targets: normalisation, and the path and query cut from it")
struct RequestTargetTests {
    @Test(
        "equivalent spellings normalise to one target",
        arguments: [
            ("/screens/home", "/screens/home", "/screens/home", nil),
            ("/screens/home?tab=1&x=2", "/screens/home?tab=1&x=2", "/screens/home", "tab=1&x=2"),
            ("/%73creens/%7euser?q=%2f%2F", "/screens/~user?q=%2F%2F", "/screens/~user", "q=%2F%2F"),
            ("/a/./b/../c", "/a/c", "/a/c", nil),
            ("/../../etc/passwd", "/etc/passwd", "/etc/passwd", nil),
            ("/a/b/..", "/a/", "/a/", nil),
            ("/a?", "/a", "/a", nil),
            ("/a?b#fragment", "/a?b", "/a", "b"),
            ("/a#fragment", "/a", "/a", nil),
            ("//a//b?x=?y", "//a//b?x=?y", "//a//b", "x=?y"),
            ("/a/.hidden?.x", "/a/.hidden?.x", "/a/.hidden", ".x"),
        ] as [(String, String, String, String?)]
    )
    func normalises(text: String, description: String, path: String, query: String?) throws {
        let target = try RequestTarget(parsing: text)
        #expect(target.description == description)
        #expect(target.path == path)
        #expect(target.query == query)
    }

    @Test("a target that needed normalising equals, and hashes like, the one spelled normally")
    func normalisedEqualsNormal() throws {
        for (spelled, normal) in [("/%61?b=%7e", "/a?b=~"), ("/x/../a?b", "/a?b"), ("/a?", "/a"), ("/%2f?q", "/%2F?q")]
        {
            let a = try RequestTarget(parsing: spelled)
            let b = try RequestTarget(parsing: normal)
            #expect(a == b)
            #expect(a.hashValue == b.hashValue)
            #expect(a.path == b.path && a.query == b.query)
        }
        #expect(try RequestTarget(parsing: "/a?b") != RequestTarget(parsing: "/a%3Fb"))
    }

    @Test(
        "targets that are not a path in origin form, or hold bytes a URI cannot, are refused",
        arguments: ["", "screens", "http://x/a", "/a b", "/a%zz", "/a%4", "/\u{7F}", "/é"]
    )
    func refuses(text: String) {
        #expect(throws: RequestTarget.InvalidTarget.self) { try RequestTarget(parsing: text) }
    }
}
