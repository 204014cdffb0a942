import NIOHTTP1
import Testing

@testable import SDUIProxyCore

@Suite("One collection of header fields, told by its bits")
struct HTTPHeadersRepresentationTests {
    @Test("a copy is the same collection; an equal one stored apart is not, nor a changed copy")
    func sameRepresentationIsOneCollection() {
        let headers = HTTPHeaders([("Host", "p"), ("User-Agent", "an app/1.0 (a phone; with a long description)")])
        let copy = headers
        #expect(headers.hasSameRepresentation(as: copy))
        // Equal, but built apart: left to the comparison of each field.
        let apart = HTTPHeaders([("Host", "p"), ("User-Agent", "an app/1.0 (a phone; with a long description)")])
        #expect(!headers.hasSameRepresentation(as: apart))
        var changed = copy
        changed.replaceOrAdd(name: "Host", value: "q")
        #expect(!headers.hasSameRepresentation(as: changed))
        #expect(headers.hasSameRepresentation(as: copy) && headers.first(name: "host") == "p")
    }

    @Test("HTTPHeaders is still a list's storage and a keep-alive state, which the same bits are the same fields of")
    func layoutIsStorageAndState() {
        // A stored property added to swift-nio's HTTPHeaders (a cache, a shared buffer) would have to be weighed
        // against `hasSameRepresentation(as:)`'s argument: this fails first.
        #expect(MemoryLayout<HTTPHeaders>.size == MemoryLayout<[(String, String)]>.size + 1)
    }
}
