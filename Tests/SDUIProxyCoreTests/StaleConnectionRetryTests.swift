import NIOHTTP1
import SDUIProxyCore
import Testing

@Suite("RFC 9110 §9.2.2: what is sent again after a reused connection failed")
struct StaleConnectionRetryTests {
    @Test("idempotent methods without a streamed body are sent again; POST, PATCH, extension methods never")
    func resend() {
        for method: HTTPMethod in [.GET, .HEAD, .OPTIONS, .TRACE, .PUT, .DELETE] {
            #expect(StaleConnectionRetry.mayResend(method, streamsBody: false), "\(method)")
            #expect(!StaleConnectionRetry.mayResend(method, streamsBody: true), "\(method) with a streamed body")
        }
        for method: HTTPMethod in [.POST, .PATCH, .RAW(value: "BREW"), .RAW(value: "get")] {
            #expect(!StaleConnectionRetry.mayResend(method, streamsBody: false), "\(method)")
        }
    }
}
