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
        // RFC 9110 sections 9.2.1 and 9.2.2; TRACE is in neither list above, and is both.
        #expect(methods.filter(\.isSafe) == [.GET, .HEAD, .OPTIONS])
        #expect(methods.filter(\.isIdempotent) == [.GET, .HEAD, .PUT, .DELETE, .OPTIONS])
        #expect(HTTPMethod.TRACE.isSafe && HTTPMethod.TRACE.isIdempotent && !HTTPMethod.PATCH.isIdempotent)
        // A method is case-sensitive (RFC 9110 section 9.1): `get` is a method of its own, forwarded as it came.
        #expect(HTTPMethod(rawValue: "GET").isGET && !HTTPMethod(rawValue: "get").isGET)
        #expect(HTTPMethod(rawValue: "HEAD").isGETOrHEAD && HTTPMethod(rawValue: "CONNECT").isCONNECT)
    }
}
