/// A small deterministic generator for the parsers' differential tests, so a failing mutation is the same on
/// every run.
struct SplitMix64 {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// One to four random edits of `input` (insert, remove or replace a byte from `alphabet`).
    mutating func mutate(_ input: inout [UInt8], from alphabet: [UInt8]) {
        for _ in 0...(next() % 4) {
            let position = Int(next() % UInt64(input.count + 1))
            let byte = alphabet[Int(next() % UInt64(alphabet.count))]
            switch next() % 3 {
            case 0: input.insert(byte, at: position)
            case 1 where position < input.count: input.remove(at: position)
            default: if position < input.count { input[position] = byte }
            }
        }
    }
}
