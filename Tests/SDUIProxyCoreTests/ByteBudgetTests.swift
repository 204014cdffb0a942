import SDUIProxyCore
import Testing

@Suite("The byte budget of cache fills")
struct ByteBudgetTests {
    @Test("reservations fit up to the limit, one that does not is refused whole, released bytes fit again")
    func reserveAndRelease() {
        let budget = ByteBudget(limit: 100)
        #expect(budget.reserve(60))
        #expect(budget.reserve(40))
        #expect(budget.inUse == 100)
        #expect(!budget.reserve(1))
        #expect(budget.inUse == 100, "a refused reservation takes nothing")
        budget.release(40)
        #expect(!budget.reserve(41))
        #expect(budget.reserve(40))
        budget.release(100)
        #expect(budget.inUse == 0)
        #expect(budget.reserve(0))
        #expect(!ByteBudget(limit: 10).reserve(11), "a reservation larger than the limit never fits")
    }

    @Test("reservations from many tasks at once never take more than the limit")
    func concurrentReservations() async {
        let budget = ByteBudget(limit: 1000)
        let granted = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var granted = 0
                    for _ in 0..<500 where budget.reserve(7) { granted += 7 }
                    return granted
                }
            }
            return await group.reduce(0, +)
        }
        #expect(granted <= 1000)
        #expect(granted == budget.inUse)
        #expect(granted > 1000 - 7, "the budget fills up to the last reservation that fits")
    }
}
