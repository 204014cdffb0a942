import SDUIProxyCore
import Testing

@Suite("The fleet log's rows")
struct FleetLogEntryTests {
    static let payloads: [FleetLogEntry.Payload] = [
        .invalidation(CacheInvalidation(.targets(["/screens/a", "/search?q=a&page=2"]))),
        .invalidation(CacheInvalidation(.targets(["/screens/a"]), soft: true)),
        .invalidation(CacheInvalidation(.prefix("/screens/"))),
        .invalidation(CacheInvalidation(.prefix("/screens?"), soft: true)),
        .invalidation(CacheInvalidation(.tag("products"))),
        .invalidation(CacheInvalidation(.all)),
        .invalidation(CacheInvalidation(.all, soft: true)),
        .prefetch(
            FleetPrefetch(urls: ["/screens/home", "/screens/cart?x=1"], platforms: ["ios", "web"], followActions: 2)
        ),
        .prefetch(FleetPrefetch(urls: ["/screens/home"], platforms: [], followActions: 0)),
    ]

    @Test("every payload survives its columns", arguments: payloads)
    func roundTrip(payload: FleetLogEntry.Payload) {
        let columns = FleetLogEntry.columns(for: payload)
        #expect(FleetLogEntry.payload(kind: columns.kind, value: columns.value, soft: columns.soft) == payload)
    }

    @Test("a kind from a newer replica is kept as unknown, to be applied as removing everything")
    func unknownKind() {
        #expect(
            FleetLogEntry.payload(kind: "surrogate-key", value: "x", soft: false) == .unknown(kind: "surrogate-key")
        )
    }

    @Test(
        "a prefetch row that cannot be read is skipped",
        arguments: ["", "url=/a", "followActions=x\nurl=/a", "followActions=1", "followActions=1\nnoise"]
    )
    func unreadablePrefetch(value: String) {
        #expect(FleetLogEntry.payload(kind: "prefetch", value: value, soft: false) == nil)
    }
}
