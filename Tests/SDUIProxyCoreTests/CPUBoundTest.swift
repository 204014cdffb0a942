/// What the long, CPU-bound tests (random sequences, mutation against a reference) call between rounds.
///
/// Swift Testing runs a synchronous test on the cooperative thread pool, which has one thread per core: two
/// such tests on a two-core machine hold the whole pool for seconds, and every other test's `await` resumes only
/// when they are done, so end-to-end tests beside them miss their deadlines. Giving the pool up between rounds
/// lets those resume.
enum CPUBoundTest {
    static func yieldToOtherTests() async {
        await Task.yield()
    }
}
