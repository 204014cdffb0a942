import CBrotli
import CompressNIO
import NIOCore
import SDUIProxyCore

/// Encodes a body into a content coding and decodes it back: gzip and HTTP's deflate through zlib (CompressNIO),
/// br through the system's libbrotli.
///
/// Synchronous CPU work with no state of its own, safe from any thread: callers run large bodies off the event
/// loop. Decoding is bounded by the caller's limit, so a small compressed body that would decode to far more
/// (a decompression bomb) fails as soon as it passes the limit instead of filling memory.
public enum ContentCoder {
    /// The levels ``encode(_:as:level:)`` takes for a coding: zlib's 0 to 9, brotli's qualities 0 to 11.
    public static func levels(for coding: ContentCoding) -> ClosedRange<Int> {
        switch coding {
        case .br: Int(BROTLI_MIN_QUALITY)...Int(BROTLI_MAX_QUALITY)
        case .gzip, .deflate: 0...9
        }
    }

    /// `body`'s readable bytes in `coding` at `level` (see ``levels(for:)``): gzip with its header and trailer
    /// (RFC 1952), deflate in the zlib format (RFC 1950, what HTTP calls deflate), br with brotli's default window.
    ///
    /// The result is allocated once its length is known, at that length (NIO rounds a buffer's storage up to a
    /// power of two, so that is its capacity): a stored form is kept in memory for as long as its entry, and the
    /// worst-case buffer a compressor writes into is about the size of the input, several times the result.
    public static func encode(
        _ body: ByteBuffer,
        as coding: ContentCoding,
        level: Int
    ) throws(EncodingError) -> ByteBuffer {
        guard levels(for: coding).contains(level) else {
            throw EncodingError(coding: coding, reason: "level \(level) is outside \(levels(for: coding))")
        }
        let encoded: ByteBuffer
        switch coding {
        case .br: encoded = try brotliEncode(body, quality: level)
        case .gzip: encoded = try zlibEncode(body, format: .gzip, coding: coding, level: level)
        case .deflate: encoded = try zlibEncode(body, format: .zlib, coding: coding, level: level)
        }
        return exactlySized(encoded)
    }

    /// `body`'s readable bytes decoded from `coding`, at most `maxBytes` of them.
    ///
    /// Fails with ``DecodingError/tooLarge`` once the decoded bytes pass `maxBytes` (having decoded at most one
    /// window of 64 KiB past it), and with ``DecodingError/corrupt(_:)`` when the body is not one complete stream
    /// of that coding: a body cut short, or followed by other bytes, is corrupt too. For `deflate`, the zlib format
    /// is expected, and raw deflate (RFC 1951, which some servers send under that name) is accepted when the body
    /// does not start with a zlib header.
    public static func decode(
        _ body: ByteBuffer,
        from coding: ContentCoding,
        maxBytes: Int
    ) throws(DecodingError) -> ByteBuffer {
        precondition(maxBytes >= 0, "maxBytes must not be negative")
        // One byte of room past the limit tells a body of exactly maxBytes from a larger one.
        let maxBytes = min(maxBytes, Int.max - 1)
        let decoded: ByteBuffer
        switch coding {
        case .br: decoded = try brotliDecode(body, maxBytes: maxBytes)
        case .gzip: decoded = try zlibDecode(body, format: .gzip, maxBytes: maxBytes)
        case .deflate:
            let format: ZlibAlgorithm = startsWithZlibHeader(body) ? .zlib : .deflate
            decoded = try zlibDecode(body, format: format, maxBytes: maxBytes)
        }
        return exactlySized(decoded)
    }

    // MARK: Brotli

    private static func brotliEncode(_ body: ByteBuffer, quality: Int) throws(EncodingError) -> ByteBuffer {
        let bound = BrotliEncoderMaxCompressedSize(body.readableBytes)
        guard bound > 0 else {
            throw EncodingError(coding: .br, reason: "a body of \(body.readableBytes) bytes is too large for brotli")
        }
        var encoded = ByteBufferAllocator().buffer(capacity: bound)
        let succeeded = body.withUnsafeReadableBytes { input in
            var succeeded = false
            encoded.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { output in
                var encodedSize = output.count
                // Brotli reads no input byte of an empty body, but wants a pointer all the same.
                let empty: UInt8 = 0
                succeeded = withUnsafePointer(to: empty) { emptyInput in
                    BrotliEncoderCompress(
                        Int32(quality),
                        BROTLI_DEFAULT_WINDOW,
                        // A hint for its context modelling, not a constraint: what is compressed is JSON and
                        // other text.
                        BROTLI_MODE_TEXT,
                        input.count,
                        input.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? emptyInput,
                        &encodedSize,
                        output.baseAddress!.assumingMemoryBound(to: UInt8.self)
                    ) == BROTLI_TRUE
                }
                return succeeded ? encodedSize : 0
            }
            return succeeded
        }
        guard succeeded else { throw EncodingError(coding: .br, reason: "the brotli encoder failed") }
        return encoded
    }

    private static func brotliDecode(_ body: ByteBuffer, maxBytes: Int) throws(DecodingError) -> ByteBuffer {
        guard let decoder = BrotliDecoderCreateInstance(nil, nil, nil) else {
            throw .corrupt("the brotli decoder could not be created")
        }
        defer { BrotliDecoderDestroyInstance(decoder) }
        // The decoder's own ring buffer is at most the stream's window, 16 MiB (large windows are not enabled),
        // and only as large as the body needs when that is less: the output is what the limit bounds.
        var output = ByteBufferAllocator().buffer(capacity: initialCapacity(forEncoded: body, maxBytes: maxBytes))
        let outcome = body.withUnsafeReadableBytes { input -> StreamOutcome in
            var availableIn = input.count
            var nextIn = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
            while true {
                let room = maxBytes + 1 - output.readableBytes
                var result = BROTLI_DECODER_RESULT_ERROR
                output.writeWithUnsafeMutableBytes(minimumWritableBytes: min(room, max(output.readableBytes, 4096))) {
                    writable in
                    let offered = min(writable.count, room)
                    var availableOut = offered
                    var nextOut = writable.baseAddress?.assumingMemoryBound(to: UInt8.self)
                    result = BrotliDecoderDecompressStream(decoder, &availableIn, &nextIn, &availableOut, &nextOut, nil)
                    return offered - availableOut
                }
                if output.readableBytes > maxBytes { return .tooLarge }
                switch result {
                case BROTLI_DECODER_RESULT_SUCCESS: return availableIn == 0 ? .finished : .trailingBytes
                case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT: continue
                case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT: return .truncated
                default: return .invalid(String(cString: BrotliDecoderErrorString(BrotliDecoderGetErrorCode(decoder))))
                }
            }
        }
        try outcome.check(coding: .br)
        return output
    }

    // MARK: zlib

    private static func zlibEncode(
        _ body: ByteBuffer,
        format: ZlibAlgorithm,
        coding: ContentCoding,
        level: Int
    ) throws(EncodingError) -> ByteBuffer {
        let sizes = zlibSizes(forBodyOf: body.readableBytes)
        let configuration = ZlibConfiguration(
            windowSize: sizes.windowBits,
            compressionLevel: Int32(level),
            memoryLevel: sizes.memoryLevel,
            strategy: .default
        )
        var input = body
        do {
            let algorithm: CompressionAlgorithm =
                format == .gzip ? .gzip(configuration: configuration) : .zlib(configuration: configuration)
            return try input.compress(with: algorithm)
        } catch {
            throw EncodingError(coding: coding, reason: "zlib failed: \(error)")
        }
    }

    /// zlib's window (as a power of two) and memory level for compressing a body of `count` bytes: the smallest
    /// window that still reaches back over the whole body, and a memory level whose buffers hold a whole window.
    ///
    /// A deflate match reaches at most 262 bytes (zlib's `MIN_LOOKAHEAD`) short of the window, so a window of at
    /// least `count + 262` bytes finds every match the largest one would. The memory level sizes the hash (twice
    /// the window's entries) and the symbol buffer, whose filling ends a block: at `windowBits - 6` it holds a
    /// window's symbols, so a body that compresses poorly is not cut into more blocks than zlib's defaults cut it
    /// (at `windowBits - 7`, a 667-byte base64 image came out 583 bytes instead of 556). Never above the defaults'
    /// 8. The defaults themselves (a 32 KiB window, memory level 8) set up about 256 KiB for every body, zeroing
    /// the hash heads: for the benchmark's 2.4 KB screen, gzip at level 6 took 346,000 instructions with them and
    /// 298,000 with a 4 KiB window, to the same 889 bytes.
    static func zlibSizes(forBodyOf count: Int) -> (windowBits: Int32, memoryLevel: Int32) {
        let reach = count.addingReportingOverflow(262)
        var windowBits: Int32 = 9
        while windowBits < 15, reach.overflow || (1 << windowBits) < reach.partialValue { windowBits += 1 }
        return (windowBits, min(windowBits - 6, 8))
    }

    /// CompressNIO's `decompress(with:maxSize:)` stops at `maxSize` (with `bufferOverflow`), but it returns what
    /// it has when the body ends before its stream does, and ignores bytes after the stream's end: a truncated
    /// gzip body would pass for a shorter one. So the stream is driven here, one window at a time.
    private static func zlibDecode(
        _ body: ByteBuffer,
        format: ZlibAlgorithm,
        maxBytes: Int
    ) throws(DecodingError) -> ByteBuffer {
        let coding: ContentCoding = format == .gzip ? .gzip : .deflate
        // zlib is handed the body's bytes by address, and an empty buffer may have none.
        guard body.readableBytes > 0 else { throw .corrupt("\(coding) body is empty") }
        let decompressor: ZlibDecompressor
        do {
            decompressor = try ZlibDecompressor(algorithm: format, windowSize: 15)
        } catch {
            throw .corrupt("zlib could not start decoding \(coding): \(error)")
        }
        var input = body
        var window = ByteBufferAllocator().buffer(capacity: windowBytes)
        var output = ByteBufferAllocator().buffer(capacity: initialCapacity(forEncoded: body, maxBytes: maxBytes))
        while true {
            window.clear()
            let outcome = inflate(&input, into: &window, with: decompressor)
            guard output.readableBytes + window.readableBytes <= maxBytes else { throw .tooLarge }
            output.writeBuffer(&window)
            let end: StreamOutcome
            switch outcome {
            case .windowFull:
                continue
            case .stopped where input.readableBytes > 0:
                // zlib stops short of the input's end only at the stream's.
                end = .trailingBytes
            case .stopped:
                end = hasEnded(decompressor) ? .finished : .truncated
            case .stream(let outcome):
                end = outcome
            }
            try end.check(coding: coding)
            return output
        }
    }

    /// How one call of zlib's inflate ended.
    private enum InflateStep {
        /// It filled the window: call it again.
        case windowFull
        /// It stopped with room left: at the end of the stream, or of the input.
        case stopped
        case stream(StreamOutcome)
    }

    private static func inflate(
        _ input: inout ByteBuffer,
        into window: inout ByteBuffer,
        with decompressor: ZlibDecompressor
    ) -> InflateStep {
        do {
            try decompressor.inflate(from: &input, to: &window)
            return .stopped
        } catch let error as CompressNIOError where error == .bufferOverflow {
            return .windowFull
        } catch let error as CompressNIOError where error == .inputBufferOverflow {
            return .stream(.truncated)
        } catch let error as CompressNIOError where error == .corruptData {
            return .stream(.invalid("not valid data"))
        } catch {
            // A preset dictionary (Z_NEED_DICT), which no HTTP body may need, among others.
            return .stream(.invalid("\(error)"))
        }
    }

    /// Whether a stream that consumed all of its input has reached its end. zlib says so only by the result code,
    /// which CompressNIO keeps to itself; but a stream at its end takes no more input, and one short of it takes
    /// whatever it is given.
    private static func hasEnded(_ decompressor: ZlibDecompressor) -> Bool {
        var probe = ByteBuffer(bytes: [0xFF])
        var scratch = ByteBufferAllocator().buffer(capacity: 16)
        guard case .stopped = inflate(&probe, into: &scratch, with: decompressor) else { return false }
        return probe.readableBytes == 1 && scratch.readableBytes == 0
    }

    /// Whether `body` starts with a zlib header (RFC 1950 section 2.2): deflate with a window of at most 32 KiB,
    /// and a check value that makes the first two bytes a multiple of 31. Raw deflate starts so by chance
    /// rarely; when it does, decoding it as zlib fails as corrupt.
    private static func startsWithZlibHeader(_ body: ByteBuffer) -> Bool {
        guard let first = body.getInteger(at: body.readerIndex, as: UInt8.self),
            let second = body.getInteger(at: body.readerIndex + 1, as: UInt8.self)
        else { return false }
        return first & 0x0F == 8 && first >> 4 <= 7 && (UInt16(first) << 8 | UInt16(second)) % 31 == 0
    }

    // MARK: Buffers

    /// What zlib inflates into per call, and so the most it decodes past a limit before stopping.
    private static let windowBytes = 64 << 10

    /// A first guess at the decoded size, grown as needed: JSON compresses about five to ten times.
    private static func initialCapacity(forEncoded body: ByteBuffer, maxBytes: Int) -> Int {
        min(maxBytes + 1, max(4096, body.readableBytes * 8))
    }

    /// `buffer`, or a copy of its readable bytes in a smaller buffer when one would be smaller: encoded and
    /// decoded bodies are kept in memory as long as their cache entries, and the buffers they were written into
    /// were sized for the worst case (an encoder's bound, a decoder's guesses).
    private static func exactlySized(_ buffer: ByteBuffer) -> ByteBuffer {
        var exact = ByteBufferAllocator().buffer(capacity: buffer.readableBytes)
        guard exact.capacity < buffer.capacity || buffer.readerIndex > 0 else { return buffer }
        exact.writeImmutableBuffer(buffer)
        return exact
    }
}

/// How decoding a whole stream ended.
private enum StreamOutcome {
    case finished
    case tooLarge
    /// The input ended before the stream did.
    case truncated
    /// The stream ended before the input did.
    case trailingBytes
    /// The library refused the input, saying why.
    case invalid(String)

    /// Throws unless the stream was decoded whole.
    func check(coding: ContentCoding) throws(ContentCoder.DecodingError) {
        switch self {
        case .finished: return
        case .tooLarge: throw .tooLarge
        case .truncated: throw .corrupt("\(coding) body ends before its stream does (truncated)")
        case .trailingBytes: throw .corrupt("\(coding) body has bytes after the end of its stream")
        case .invalid(let reason): throw .corrupt("\(coding) body is not valid: \(reason)")
        }
    }
}
