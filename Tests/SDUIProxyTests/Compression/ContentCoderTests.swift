import CompressNIO
import NIOCore
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("Content codings: encoding and bounded decoding")
struct ContentCoderTests {
    /// A screen of `bytes` bytes of JSON or a little more: a container of texts, repetitive as server-driven UI is.
    static func screen(bytes: Int) -> ByteBuffer {
        var json = #"{"_beagleComponent_":"beagle:container","children":["#
        var index = 0
        while json.utf8.count < bytes - 2 {
            json += #"{"_beagleComponent_":"beagle:text","id":"item-\#(index)","text":"Item number \#(index)"},"#
            index += 1
        }
        json += "]}"
        return ByteBuffer(string: json)
    }

    static let sizes = [0, 1, 2048, 300 << 10]

    static func body(bytes: Int) -> ByteBuffer {
        switch bytes {
        case 0: ByteBuffer()
        case 1: ByteBuffer(string: "{")
        default: screen(bytes: bytes)
        }
    }

    /// The levels the `compression` section stores at unless told otherwise.
    static func defaultLevel(_ coding: ContentCoding) -> Int {
        coding == .br ? 5 : 6
    }

    private func expectCorrupt(
        _ body: ByteBuffer,
        from coding: ContentCoding,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        do {
            let decoded = try ContentCoder.decode(body, from: coding, maxBytes: 1 << 20)
            Issue.record("decoded \(decoded.readableBytes) bytes", sourceLocation: sourceLocation)
        } catch .corrupt(let reason) {
            #expect(reason.contains(coding.rawValue), "\(reason)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(error)", sourceLocation: sourceLocation)
        }
    }

    // MARK: Round trips

    @Test(
        "every coding decodes what it encoded, from empty to 300 KB",
        arguments: ContentCoding.allCases,
        ContentCoderTests.sizes
    )
    func roundTrip(coding: ContentCoding, bytes: Int) throws {
        let body = Self.body(bytes: bytes)
        let encoded = try ContentCoder.encode(body, as: coding, level: Self.defaultLevel(coding))
        let decoded = try ContentCoder.decode(encoded, from: coding, maxBytes: body.readableBytes)
        #expect(decoded == body)
    }

    @Test("zlib's window is the smallest that reaches over the whole body, its buffers a window's worth")
    func zlibSizes() {
        let expected: [(count: Int, windowBits: Int32)] = [
            (0, 9), (250, 9), (251, 10), (762, 10), (763, 11), (2_427, 12), (32_506, 15), (32_507, 15),
            (1 << 20, 15), (Int.max, 15),
        ]
        for (count, windowBits) in expected {
            let sizes = ContentCoder.zlibSizes(forBodyOf: count)
            #expect(sizes.windowBits == windowBits, "\(count) bytes")
            #expect(sizes.memoryLevel == min(windowBits - 6, 8), "\(count) bytes")
        }
    }

    /// `bytes` bytes that compress poorly, as an image inlined in base64 does: a fixed pseudo-random sequence.
    static func lowRedundancy(bytes: Int) -> ByteBuffer {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var body = ByteBuffer()
        for _ in 0..<bytes {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            body.writeInteger(alphabet[Int(state >> 58)])
        }
        return body
    }

    @Test(
        "bodies at the edges of zlib's windows round-trip, no larger than zlib's default window and memory make them",
        arguments: [ContentCoding.gzip, .deflate],
        [250, 251, 762, 763, 1_786, 1_787, 2_427, 3_834, 3_835, 32_506, 32_507, 100_000]
    )
    func zlibWindowEdges(coding: ContentCoding, bytes: Int) throws {
        // Cut to exactly `bytes`: a screen is made a little longer than asked.
        let screen = Self.screen(bytes: bytes)
        for body in [screen.getSlice(at: screen.readerIndex, length: bytes)!, Self.lowRedundancy(bytes: bytes)] {
            #expect(body.readableBytes == bytes)
            try expectNoLargerThanDefaults(body, as: coding)
        }
    }

    private func expectNoLargerThanDefaults(
        _ body: ByteBuffer,
        as coding: ContentCoding,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let encoded = try ContentCoder.encode(body, as: coding, level: 6)
        #expect(
            try ContentCoder.decode(encoded, from: coding, maxBytes: body.readableBytes) == body,
            sourceLocation: sourceLocation
        )
        let defaults = ZlibConfiguration(windowSize: 15, compressionLevel: 6, memoryLevel: 8, strategy: .default)
        var input = body
        let withDefaults = try input.compress(
            with: coding == .gzip ? .gzip(configuration: defaults) : .zlib(configuration: defaults)
        )
        #expect(
            encoded.readableBytes <= withDefaults.readableBytes,
            "\(body.readableBytes) bytes",
            sourceLocation: sourceLocation
        )
    }

    @Test("the lowest and highest levels round-trip too", arguments: ContentCoding.allCases)
    func levelsRoundTrip(coding: ContentCoding) throws {
        let body = Self.screen(bytes: 4096)
        for level in [ContentCoder.levels(for: coding).lowerBound, ContentCoder.levels(for: coding).upperBound] {
            let encoded = try ContentCoder.encode(body, as: coding, level: level)
            let decoded = try ContentCoder.decode(encoded, from: coding, maxBytes: body.readableBytes)
            #expect(decoded == body, "level \(level)")
        }
    }

    @Test("a level the coding does not have is refused, naming it", arguments: ContentCoding.allCases)
    func levelOutOfRange(coding: ContentCoding) {
        let levels = ContentCoder.levels(for: coding)
        for level in [levels.lowerBound - 1, levels.upperBound + 1] {
            #expect(throws: ContentCoder.EncodingError.self) {
                try ContentCoder.encode(Self.screen(bytes: 512), as: coding, level: level)
            }
        }
    }

    @Test("only a body's readable bytes are encoded and decoded")
    func readableBytesOnly() throws {
        var framed = ByteBuffer(string: "skipped")
        framed.writeImmutableBuffer(Self.screen(bytes: 2048))
        framed.moveReaderIndex(forwardBy: 7)
        for coding in ContentCoding.allCases {
            var encoded = ByteBuffer(string: "xx")
            var body = try ContentCoder.encode(framed, as: coding, level: Self.defaultLevel(coding))
            encoded.writeBuffer(&body)
            encoded.moveReaderIndex(forwardBy: 2)
            #expect(try ContentCoder.decode(encoded, from: coding, maxBytes: 4096) == Self.screen(bytes: 2048))
        }
    }

    // MARK: Sizes

    @Test("repetitive JSON comes out smaller, in a buffer sized to it", arguments: ContentCoding.allCases)
    func smallerAndExactlySized(coding: ContentCoding) throws {
        for bytes in [2048, 300 << 10] {
            let body = Self.screen(bytes: bytes)
            let encoded = try ContentCoder.encode(body, as: coding, level: Self.defaultLevel(coding))
            #expect(encoded.readableBytes < body.readableBytes / 4, "\(bytes) bytes to \(encoded.readableBytes)")
            // NIO rounds a buffer's storage up to a power of two: under twice the bytes is the least there is,
            // where the compressor's worst-case buffer would be about the size of the input.
            #expect(encoded.capacity < 2 * encoded.readableBytes, "\(encoded.capacity) for \(encoded.readableBytes)")
            let decoded = try ContentCoder.decode(encoded, from: coding, maxBytes: 1 << 20)
            #expect(decoded.capacity < 2 * decoded.readableBytes, "\(decoded.capacity) for \(decoded.readableBytes)")
        }
    }

    @Test(
        "a body that decodes to more than maxBytes is too large; exactly maxBytes is not",
        arguments: ContentCoding.allCases
    )
    func tooLarge(coding: ContentCoding) throws {
        let body = Self.screen(bytes: 200_000)
        let encoded = try ContentCoder.encode(body, as: coding, level: Self.defaultLevel(coding))
        #expect(try ContentCoder.decode(encoded, from: coding, maxBytes: body.readableBytes) == body)
        #expect(throws: ContentCoder.DecodingError.tooLarge) {
            try ContentCoder.decode(encoded, from: coding, maxBytes: body.readableBytes - 1)
        }
        #expect(throws: ContentCoder.DecodingError.tooLarge) {
            try ContentCoder.decode(encoded, from: coding, maxBytes: 0)
        }
    }

    @Test("a bomb, 64 MiB of zeros, stops soon after 1 MiB", arguments: ContentCoding.allCases)
    func bomb(coding: ContentCoding) throws {
        let zeros = ByteBuffer(repeating: 0, count: 64 << 20)
        let bomb = try ContentCoder.encode(zeros, as: coding, level: 1)
        #expect(bomb.readableBytes < 1 << 20)
        let clock = ContinuousClock()
        let started = clock.now
        #expect(throws: ContentCoder.DecodingError.tooLarge) {
            try ContentCoder.decode(bomb, from: coding, maxBytes: 1 << 20)
        }
        // Decoding all of it takes far longer on a loaded machine; stopping at the limit takes milliseconds.
        #expect(clock.now - started < .seconds(2))
    }

    // MARK: Other encoders' output

    static let text = #"{"_beagleComponent_":"beagle:text","text":"Hello, world! Hello, world! Hello, world!"}"#

    /// `text` by Python's `gzip.compress(text, compresslevel=9, mtime=0)`.
    static let pythonGzip: [UInt8] = [
        0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xAB, 0x56, 0x8A, 0x4F, 0x4A, 0x4D,
        0x4C, 0xCF, 0x49, 0x75, 0xCE, 0xCF, 0x2D, 0xC8, 0xCF, 0x4B, 0xCD, 0x2B, 0x89, 0x57, 0xB2, 0x52,
        0x82, 0x08, 0x59, 0x95, 0xA4, 0x56, 0x94, 0x28, 0xE9, 0x28, 0x81, 0x29, 0x2B, 0x25, 0x8F, 0xD4,
        0x9C, 0x9C, 0x7C, 0x1D, 0x85, 0xF2, 0xFC, 0xA2, 0x9C, 0x14, 0x45, 0x05, 0x3C, 0x3C, 0xA5, 0x5A,
        0x00, 0xC6, 0x68, 0xF4, 0xB9, 0x56, 0x00, 0x00, 0x00,
    ]

    /// `text` by Python's `zlib.compress(text, 9)`: the zlib format, HTTP's deflate.
    static let pythonZlib: [UInt8] = [
        0x78, 0xDA, 0xAB, 0x56, 0x8A, 0x4F, 0x4A, 0x4D, 0x4C, 0xCF, 0x49, 0x75, 0xCE, 0xCF, 0x2D, 0xC8,
        0xCF, 0x4B, 0xCD, 0x2B, 0x89, 0x57, 0xB2, 0x52, 0x82, 0x08, 0x59, 0x95, 0xA4, 0x56, 0x94, 0x28,
        0xE9, 0x28, 0x81, 0x29, 0x2B, 0x25, 0x8F, 0xD4, 0x9C, 0x9C, 0x7C, 0x1D, 0x85, 0xF2, 0xFC, 0xA2,
        0x9C, 0x14, 0x45, 0x05, 0x3C, 0x3C, 0xA5, 0x5A, 0x00, 0x1F, 0xB6, 0x1D, 0x79,
    ]

    /// Raw deflate, without the zlib wrapper: the same bytes as Python's `zlib.compressobj(9, zlib.DEFLATED, -15)`.
    static let pythonRawDeflate: [UInt8] = Array(pythonZlib[2..<(pythonZlib.count - 4)])

    /// `text` by the `brotli` Python package 1.2.1 (`brotli.compress(text, quality=11)`), which builds its own
    /// copy of the encoder, newer than the system's libbrotli.
    static let pythonBrotli: [UInt8] = [
        0x1B, 0x55, 0x00, 0x48, 0x04, 0xFE, 0x67, 0x47, 0x5A, 0x8F, 0x03, 0xFA, 0x26, 0xAD, 0xB6, 0x96,
        0x04, 0x76, 0x3B, 0x0F, 0xB8, 0xF8, 0x70, 0x92, 0xB4, 0xE6, 0xCD, 0x80, 0x0D, 0x38, 0xC0, 0xF4,
        0x29, 0x92, 0xF9, 0x7D, 0x64, 0x4F, 0xED, 0xCD, 0x08, 0xD5, 0x44, 0x64, 0x4A, 0x84, 0x00, 0x8B,
        0xFF, 0x55, 0xC8, 0xD7, 0xAD, 0x88, 0x0F,
    ]

    @Test(
        "what other encoders wrote decodes: gzip, zlib and raw deflate from Python, br from the brotli package",
        arguments: [
            (ContentCoding.gzip, ContentCoderTests.pythonGzip), (.deflate, ContentCoderTests.pythonZlib),
            (.deflate, ContentCoderTests.pythonRawDeflate), (.br, ContentCoderTests.pythonBrotli),
        ]
    )
    func independentEncoders(coding: ContentCoding, bytes: [UInt8]) throws {
        let decoded = try ContentCoder.decode(ByteBuffer(bytes: bytes), from: coding, maxBytes: 1024)
        #expect(String(buffer: decoded) == Self.text)
    }

    @Test("gzip is written as RFC 1952 frames it, deflate as RFC 1950 does")
    func formats() throws {
        let body = Self.screen(bytes: 2048)
        let gzip = Array(buffer: try ContentCoder.encode(body, as: .gzip, level: 6))
        // Magic, deflate; the trailer's last four bytes are the length, little-endian.
        #expect(gzip.prefix(3) == [0x1F, 0x8B, 0x08])
        let length = gzip.suffix(4).reversed().reduce(0) { $0 << 8 | Int($1) }
        #expect(length == body.readableBytes)
        let zlib = Array(buffer: try ContentCoder.encode(body, as: .deflate, level: 6))
        #expect(zlib[0] & 0x0F == 8 && (Int(zlib[0]) << 8 | Int(zlib[1])) % 31 == 0)
    }

    // MARK: Corrupt bodies

    @Test("a body cut short is corrupt, wherever it is cut", arguments: ContentCoding.allCases)
    func truncated(coding: ContentCoding) throws {
        let encoded = try ContentCoder.encode(Self.screen(bytes: 2048), as: coding, level: Self.defaultLevel(coding))
        for length in [0, 1, encoded.readableBytes / 2, encoded.readableBytes - 4, encoded.readableBytes - 1] {
            expectCorrupt(encoded.getSlice(at: encoded.readerIndex, length: length)!, from: coding)
        }
    }

    @Test("bytes after the end of the stream make it corrupt", arguments: ContentCoding.allCases)
    func trailingBytes(coding: ContentCoding) throws {
        var encoded = try ContentCoder.encode(Self.screen(bytes: 2048), as: coding, level: Self.defaultLevel(coding))
        encoded.writeString("garbage")
        expectCorrupt(encoded, from: coding)
    }

    @Test("bytes that are not the coding at all are corrupt", arguments: ContentCoding.allCases)
    func notTheCoding(coding: ContentCoding) {
        expectCorrupt(ByteBuffer(string: Self.text), from: coding)
        expectCorrupt(ByteBuffer(repeating: 0xFF, count: 100), from: coding)
    }

    @Test("a gzip body whose checksum does not match is corrupt")
    func checksum() throws {
        var bytes = Self.pythonGzip
        bytes[bytes.count - 6] ^= 0x01  // in the CRC-32
        expectCorrupt(ByteBuffer(bytes: bytes), from: .gzip)
        var zlib = Self.pythonZlib
        zlib[zlib.count - 1] ^= 0x01  // in the Adler-32
        expectCorrupt(ByteBuffer(bytes: zlib), from: .deflate)
    }
}
