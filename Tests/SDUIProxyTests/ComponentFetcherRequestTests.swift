import NIOHTTP1
import Testing

@testable import SDUIProxy
@testable import SDUIProxyCore

@Suite("What a cache fill's request allows")
struct ComponentFetcherRequestTests {
    private func request(
        _ headers: HTTPHeaders,
        fields: RequestFieldPresence? = nil,
        mayCoalesce: Bool = true
    ) -> ComponentFetcher.Request {
        .homeScreen(clientHeaders: headers, clientFields: fields, mayCoalesce: mayCoalesce)
    }

    @Test("a request with Authorization never shares an exchange, whatever its caller says")
    func authorizationFetchesAlone() {
        let credentials: HTTPHeaders = ["Authorization": "Bearer t"]
        #expect(request([:]).mayCoalesce)
        #expect(!request([:], mayCoalesce: false).mayCoalesce)
        #expect(!request(credentials).mayCoalesce)
        #expect(!request(["authorization": ""]).mayCoalesce)
        // The fields the router noted stand for the headers, and are kept for the fill's decisions.
        #expect(!request(credentials, fields: RequestFieldPresence(credentials)).mayCoalesce)
        #expect(request(credentials).clientFields == [.authorization])
        // Noted fields are what is read: fields that say more than the headers (never less) decide.
        #expect(!request([:], fields: [.authorization]).mayCoalesce)
        #expect(
            request(["Cache-Control": "no-store", "Range": "bytes=0-1"]).clientFields == [.cacheControl, .range]
        )
    }

    @Test("the fill's policy reads a request's no-store and Authorization from the fields noted")
    func fillPolicyUsesTheNotedFields() {
        let rules = StorageRules()
        let noStore: HTTPHeaders = ["Cache-Control": "no-store"]
        #expect(request(noStore).fillPolicy(rules).requestFields == [.cacheControl])
        let fields = HTTPFieldLines(["Cache-Control": "max-age=60"] as HTTPHeaders)
        let stores = CacheFillPolicy.StoreDecision.store(lifetime: 60)
        #expect(request([:]).fillPolicy(rules).storeDecision(status: .ok, fields: fields) == stores)
        #expect(request(noStore).fillPolicy(rules).storeDecision(status: .ok, fields: fields) != stores)
        let credentials: HTTPHeaders = ["Authorization": "Bearer t"]
        #expect(request(credentials).fillPolicy(rules).storeDecision(status: .ok, fields: fields) != stores)
        #expect(
            request([:], fields: [.authorization]).fillPolicy(rules).storeDecision(status: .ok, fields: fields)
                != stores
        )
    }
}
