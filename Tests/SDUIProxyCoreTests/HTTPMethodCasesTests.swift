import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("Methods told apart by case")
struct HTTPMethodCasesTests {
    @Test("each property is true of its own methods only, as the parser names them")
    func cases() {
        let methods: [HTTPMethod] = [.GET, .HEAD, .POST, .PUT, .DELETE, .CONNECT, .OPTIONS, .PATCH, .RAW(value: "get")]
        #expect(methods.filter(\.isGET) == [.GET])
        #expect(methods.filter(\.isHEAD) == [.HEAD])
        #expect(methods.filter(\.isGETOrHEAD) == [.GET, .HEAD])
        #expect(methods.filter(\.isCONNECT) == [.CONNECT])
        // A method is case-sensitive (RFC 9110 section 9.1): `get` is a method of its own, forwarded as it came.
        #expect(HTTPMethod(rawValue: "GET").isGET && !HTTPMethod(rawValue: "get").isGET)
        #expect(HTTPMethod(rawValue: "HEAD").isGETOrHEAD && HTTPMethod(rawValue: "CONNECT").isCONNECT)
    }
}
