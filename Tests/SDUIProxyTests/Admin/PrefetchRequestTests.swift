import Foundation
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("POST /prefetch bodies: read, or refused with the field and what it should be")
struct PrefetchRequestTests {
    private func parse(_ text: String) throws(ProxyError) -> PrefetchRequest {
        try PrefetchRequest.parse(Data(text.utf8))
    }

    @Test("a whole body, and one with only urls")
    func accepted() throws {
        #expect(
            try parse(#"{"urls":["/a","/b"],"platforms":["IOS"],"followActions":2,"fleet":true,"other":1}"#)
                == PrefetchRequest(urls: ["/a", "/b"], platforms: ["IOS"], followActions: 2, fleet: true)
        )
        #expect(try parse(#"{"urls":["/a"]}"#) == PrefetchRequest(urls: ["/a"]))
        #expect(
            try parse(#"{"urls":[],"platforms":null,"followActions":null,"fleet":null}"#)
                == PrefetchRequest(urls: [])
        )
        #expect(try parse(#"{"urls":["/a"],"followActions":1.0}"#).followActions == 1)
    }

    @Test(
        "each wrong shape names its field and what it got, never a decoder's words",
        arguments: [
            (#"{"urls":"/a"}"#, "urls: expected a list of URLs, got a string"),
            (#"{"urls":{"a":1}}"#, "urls: expected a list of URLs, got an object"),
            (#"{"urls":null}"#, "urls: expected a list of URLs, got null"),
            (#"{"urls":7}"#, "urls: expected a list of URLs, got the number 7"),
            (#"{"urls":["/a",true]}"#, "urls[1]: expected a URL (a string), got true"),
            (#"{"urls":[["/a"]]}"#, "urls[0]: expected a URL (a string), got a list"),
            (#"{"urls":["/a"],"platforms":"IOS"}"#, "platforms: expected a list of platform names, got a string"),
            (
                #"{"urls":["/a"],"platforms":[1]}"#,
                "platforms[0]: expected a platform name (a string), got the number 1"
            ),
            (#"{"urls":["/a"],"followActions":"2"}"#, "followActions: expected a whole number, got a string"),
            (#"{"urls":["/a"],"followActions":1.5}"#, "followActions: expected a whole number, got the number 1.5"),
            (#"{"urls":["/a"],"followActions":true}"#, "followActions: expected a whole number, got true"),
            (#"{"urls":["/a"],"fleet":"yes"}"#, "fleet: expected true or false, got a string"),
            (#"{"urls":["/a"],"fleet":1}"#, "fleet: expected true or false, got the number 1"),
            (#"{"platforms":["IOS"]}"#, #"urls: missing; expected {"urls": [...]}"#),
            (#"["/a"]"#, #"expected an object like {"urls": [...]}, got a list"#),
            (#""/a""#, #"expected an object like {"urls": [...]}, got a string"#),
            ("not json", #"the body is not valid JSON; expected {"urls": [...]}"#),
        ]
    )
    func refused(body: String, message: String) {
        #expect(throws: ProxyError(.badRequest, message)) { try parse(body) }
    }
}
