import SDUIProxyCore
import Testing

@Suite("Path prefixes match whole segments")
struct PathPrefixTests {
    @Test(
        "what a prefix covers",
        arguments: [
            ("/screens/c", "/screens/c", true),
            ("/screens/c", "/screens/c/1", true),
            ("/screens/c", "/screens/c?tab=2", true),
            ("/screens/c", "/screens/cc/a", false),
            ("/screens/c", "/screens/c-export", false),
            ("/screens/c", "/screens", false),
            ("/screens/", "/screens/anything", true),
            ("/screens/", "/screens", false),
            ("/", "/a/b", true),
            ("/search?", "/search?q=a", true),
            ("/search?", "/search", false),
            ("/search?q=", "/search?q=abc", true),
        ]
    )
    func covers(prefix: String, target: String, expected: Bool) {
        #expect(PathPrefix(prefix).matches(target) == expected)
    }
}
