import Testing

@testable import SDUIProxyCore

@Suite("Trace sampling: the share of new traces recorded, and a client's sampled flag")
struct TraceSamplerTests {
    @Test("ratio 1 records every trace, ratio 0 none")
    func extremes() {
        var all = TraceSampler(ratio: 1, seed: 7)
        var none = TraceSampler(ratio: 0, seed: 7)
        #expect((0..<1000).allSatisfy { _ in all.samples() })
        #expect((0..<1000).allSatisfy { _ in !none.samples() })
    }

    @Test(
        "a ratio between records about that share of traces, spread over the draws",
        arguments: [0.01, 0.25, 0.5, 0.9]
    )
    func share(_ ratio: Double) {
        var sampler = TraceSampler(ratio: ratio, seed: 42)
        let draws = 200_000
        var sampled = 0
        var longestRun = 0
        var run = 0
        for _ in 0..<draws {
            if sampler.samples() {
                sampled += 1
                run = 0
            } else {
                run += 1
                longestRun = max(longestRun, run)
            }
        }
        let share = Double(sampled) / Double(draws)
        #expect(abs(share - ratio) < 0.005, "\(share) for \(ratio)")
        // Not every n-th: a run of misses as long as chance gives, not a fixed period.
        #expect(longestRun > Int(1 / ratio))
    }

    @Test("W3C traceparent: the sampled flag of a well-formed field; a malformed one is ignored")
    func traceparentFlag() {
        let trace = "0af7651916cd43dd8448eb211c80319c"
        let parent = "b7ad6b7169203331"
        #expect(TraceSampler.sampledFlag(ofTraceparent: "00-\(trace)-\(parent)-01") == true)
        #expect(TraceSampler.sampledFlag(ofTraceparent: "00-\(trace)-\(parent)-03") == true)
        #expect(TraceSampler.sampledFlag(ofTraceparent: "00-\(trace)-\(parent)-00") == false)
        // A later version may add fields after a dash.
        #expect(TraceSampler.sampledFlag(ofTraceparent: "01-\(trace)-\(parent)-01-extra") == true)
        for malformed in [
            "", "00-\(trace)-\(parent)", "ff-\(trace)-\(parent)-01", "00-\(trace.uppercased())-\(parent)-01",
            "00-\(trace)-\(parent)-0x", "00-\(trace)-\(parent)-01x", "00_\(trace)-\(parent)-01",
            // Version 00 has nothing after its flags; ids of zeros name no trace and no parent.
            "00-\(trace)-\(parent)-01-extra", "00-\(String(repeating: "0", count: 32))-\(parent)-01",
            "00-\(trace)-0000000000000000-01",
        ] {
            #expect(TraceSampler.sampledFlag(ofTraceparent: malformed) == nil, "\(malformed)")
        }
    }
}
