/// Decides which new traces are recorded (`tracing.sampleRatio`), before anything of a span is made: an unsampled
/// request then costs one draw, not a span, ids and a context.
///
/// One per event loop, so that drawing writes nothing another loop reads. The draws come from a small generator
/// (xorshift64*, seeded once from the system's), as a sampler needs spread, not secrecy.
public struct TraceSampler: Sendable {
    /// The share of draws that sample, 0 to 1.
    public let ratio: Double
    private let threshold: UInt64
    private var state: UInt64

    /// A sampler drawing `ratio` of new traces; `seed` makes the draws repeatable (tests), nil seeds at random.
    public init(ratio: Double, seed: UInt64? = nil) {
        self.ratio = min(max(ratio, 0), 1)
        // ratio 1 is handled apart: 2^64 does not fit.
        self.threshold = self.ratio >= 1 ? .max : UInt64(self.ratio * 0x1p64)
        var seed = seed ?? UInt64.random(in: 1...UInt64.max)
        if seed == 0 { seed = 0x9E37_79B9_7F4A_7C15 }
        self.state = seed
    }

    /// Whether the next new trace is recorded.
    public mutating func samples() -> Bool {
        if ratio >= 1 { return true }
        if ratio <= 0 { return false }
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D < threshold
    }

    /// The sampled flag of a W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`): true or false when the field
    /// is well formed, nil when it is not (it is then ignored, as a tracer ignores it). Version `00` is exactly 55
    /// characters; a later version may add fields after a dash; `ff` is invalid, as are all-zero ids (W3C Trace
    /// Context, section 3.2.2).
    public static func sampledFlag(ofTraceparent value: String) -> Bool? {
        let bytes = Array(value.utf8)
        guard bytes.count >= 55, bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"),
            bytes[52] == UInt8(ascii: "-"), let flags = hexValue(bytes[54])
        else { return nil }
        let isVersionZero = bytes[0] == UInt8(ascii: "0") && bytes[1] == UInt8(ascii: "0")
        guard isVersionZero ? bytes.count == 55 : (bytes.count == 55 || bytes[55] == UInt8(ascii: "-")) else {
            return nil
        }
        guard !(bytes[0] == UInt8(ascii: "f") && bytes[1] == UInt8(ascii: "f")),
            bytes[0..<2].allSatisfy({ hexValue($0) != nil }), bytes[3..<35].allSatisfy({ hexValue($0) != nil }),
            bytes[36..<52].allSatisfy({ hexValue($0) != nil }), hexValue(bytes[53]) != nil,
            bytes[3..<35].contains(where: { $0 != UInt8(ascii: "0") }),
            bytes[36..<52].contains(where: { $0 != UInt8(ascii: "0") })
        else { return nil }
        return flags & 1 == 1
    }

    /// A lower-case hex digit's value, as trace context writes them (section 3.2.2); nil for any other byte.
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte) ? nil : HTTPSyntax.hexValue(byte)
    }
}
