import CSystemRandom
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// 128 random bits as 32 lower-case hex digits: the ids of requests that bring none and of queued writes, and the
/// names of request bodies spooled to disk.
///
/// The bits come from the system's secure generator, so an id cannot be guessed: a queue id is all a client needs
/// to read its write's status. `SystemRandomNumberGenerator` asks the kernel for eight bytes a call, so an id was
/// two `getrandom` system calls, 0.8 µs of a forwarded request's 30 on a 2-vCPU host, and every request that
/// names no id of its own is given one. Each thread keeps a block of the kernel's bytes instead and takes an id's
/// sixteen from it: the same generator, one call per ``RandomBlock/wordCount`` / 2 ids.
enum SecureRandomID {
    /// A new id.
    static func make() -> String {
        let block = blocks.currentValue(orMake: RandomBlock.init)
        let (high, low) = block.next128()
        // Written in place, eight digits at a time: a table and a byte array made for each id were most of what an
        // id cost, and a digit at a time about 250 instructions.
        return String(unsafeUninitializedCapacity: 32) { out in
            let raw = UnsafeMutableRawBufferPointer(out)
            func put(_ bits: UInt64, at offset: Int) {
                let digits = hexDigits(UInt32(truncatingIfNeeded: bits))
                raw.storeBytes(of: digits.littleEndian, toByteOffset: offset, as: UInt64.self)
            }
            put(high, at: 0)
            put(high >> 32, at: 8)
            put(low, at: 16)
            put(low >> 32, at: 24)
            return 32
        }
    }

    /// The eight lower-case hex digits of `value` as the bytes of a word, its lowest digit in the lowest byte: each
    /// nibble is spread to a byte of its own, then made a digit or a letter, all eight at once.
    @inline(__always)
    static func hexDigits(_ value: UInt32) -> UInt64 {
        var nibbles = UInt64(value)
        nibbles = (nibbles | nibbles << 16) & 0x0000_FFFF_0000_FFFF
        nibbles = (nibbles | nibbles << 8) & 0x00FF_00FF_00FF_00FF
        nibbles = (nibbles | nibbles << 4) & 0x0F0F_0F0F_0F0F_0F0F
        // A nibble of ten or more is a letter: 39 above where `0` + nibble falls (`a` is `0` + 49).
        let letters = ((nibbles &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return nibbles &+ 0x3030_3030_3030_3030 &+ letters &* 39
    }

    private static let blocks = ThreadSpecificVariable<RandomBlock>()

    /// One thread's block of the kernel's random bytes: taken a word at a time, each word cleared as it is taken
    /// (an id's bits are not left behind in memory), and drawn again when all are taken.
    ///
    /// `@unchecked Sendable` for the thread-specific variable that holds it: only the thread that made it reaches
    /// it there, so its words are never shared.
    final class RandomBlock: @unchecked Sendable {
        /// 256 bytes: the most `getrandom` returns whole in one call, never cut short by a signal. Even: words are
        /// taken in pairs.
        static let wordCount = 32

        /// Zero until the first draw: every word counts as taken, and cleared.
        private let words = UnsafeMutablePointer<UInt64>.allocate(capacity: RandomBlock.wordCount)
        private var taken = RandomBlock.wordCount
        /// How many times the block was drawn from the kernel.
        private(set) var draws = 0

        /// Whether every word taken from the current draw has been cleared.
        var takenWordsAreCleared: Bool {
            (0..<taken).allSatisfy { words[$0] == 0 }
        }

        init() {
            words.initialize(repeating: 0, count: Self.wordCount)
        }

        deinit {
            words.update(repeating: 0, count: Self.wordCount)
            words.deallocate()
        }

        /// The next 128 random bits. `taken` is read once and written once: each access to a class's stored
        /// property is a run-time exclusivity check.
        func next128() -> (UInt64, UInt64) {
            var index = taken
            if index == Self.wordCount {
                refill()
                index = 0
            }
            let pair = (words[index], words[index + 1])
            words[index] = 0
            words[index + 1] = 0
            taken = index + 2
            return pair
        }

        private func refill() {
            let byteCount = Self.wordCount * MemoryLayout<UInt64>.size
            var filled = 0
            while filled < byteCount {
                let count = sdui_system_random(UnsafeMutableRawPointer(words) + filled, byteCount - filled)
                if count > 0 {
                    filled += count
                } else if count < 0, errno == EINTR {
                    continue
                } else {
                    // The system call is missing (a kernel before 3.17) or refused: the standard library's generator,
                    // which reads the same source its own way, fills the rest.
                    var generator = SystemRandomNumberGenerator()
                    for index in (filled / 8)..<Self.wordCount { words[index] = generator.next() }
                    break
                }
            }
            draws += 1
        }
    }
}
