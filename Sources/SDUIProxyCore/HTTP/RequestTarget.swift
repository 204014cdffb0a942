/// A request target in origin form (`/path?query`), normalised so that equivalent spellings share one cache
/// entry and the backend receives exactly what the key describes.
///
/// Normalisation (RFC 3986 section 6.2.2): percent-encoded unreserved characters are decoded, other
/// percent-encodings get upper-case hex digits, and `.`/`..` segments are removed (so a target can never
/// climb above `/`). An empty query (`/a?`) is dropped. Repeated slashes and the order of query parameters
/// are kept, because backends may give them meaning.
public struct RequestTarget: Hashable, Sendable, CustomStringConvertible {
    /// `path?query`, as sent upstream and used in cache keys; kept, not rebuilt, since every request needs it.
    public let description: String
    /// Where the query's `?` is in ``description``, in UTF-8 code units; nil when there is no query. The path and
    /// query are cut from ``description`` only when asked for: most requests never need them apart.
    private let questionMarkOffset: Int?

    /// The normalised path, starting with `/`.
    public var path: String {
        guard let questionMarkOffset else { return description }
        return String(description.utf8.prefix(questionMarkOffset))!
    }

    /// ``path`` without a copy: a view of ``description``.
    public var pathView: Substring {
        guard let questionMarkOffset else { return description[...] }
        let utf8 = description.utf8
        return Substring(utf8[..<utf8.index(utf8.startIndex, offsetBy: questionMarkOffset)])
    }

    /// The normalised query without `?`, or nil when there is none.
    public var query: String? {
        questionMarkOffset.map { String(description.utf8.dropFirst($0 + 1))! }
    }

    public struct InvalidTarget: Error, Equatable, Sendable {
        public var reason: String
    }

    /// Parses and normalises a target in origin form; fails for anything else or for bytes a URI cannot hold.
    public init(parsing text: String) throws(InvalidTarget) {
        if let clean = Self.alreadyNormal(text) {
            self = clean
            return
        }
        let utf8 = Array(text.utf8)
        guard utf8.first == UInt8(ascii: "/") else {
            throw InvalidTarget(reason: "the request target must be a path starting with /")
        }
        var end = utf8.count
        if let hash = utf8.firstIndex(of: UInt8(ascii: "#")) { end = hash }
        let questionMark = utf8[..<end].firstIndex(of: UInt8(ascii: "?"))
        let rawPath = utf8[..<(questionMark ?? end)]
        let rawQuery = questionMark.map { utf8[($0 + 1)..<end] }

        let path = Self.removeDotSegments(try Self.normalisePercentEncoding(rawPath))
        var query: String?
        if let rawQuery, !rawQuery.isEmpty {
            query = String(decoding: try Self.normalisePercentEncoding(rawQuery), as: UTF8.self)
        }
        self.init(
            description: query.map { path + "?" + $0 } ?? path,
            questionMarkOffset: query.map { _ in path.utf8.count }
        )
    }

    private init(description: String, questionMarkOffset: Int?) {
        self.description = description
        self.questionMarkOffset = questionMarkOffset
    }

    /// The common case, checked in one pass without copying: a target with no percent-encoding, no fragment,
    /// no dot segment and no empty query is already normal.
    ///
    /// Every request's target comes through here. Most of its bytes are plain (``notPlainTargetBytes(_:)`` finds
    /// those that are not), and they are passed over eight at a time: a byte that is not plain goes through the
    /// cases, and so do the last seven bytes, one at a time.
    static func alreadyNormal(_ text: String) -> RequestTarget? {
        let questionMark = text.withContiguousUTF8 { bytes -> Int?? in
            guard bytes.first == UInt8(ascii: "/") else { return nil }
            let raw = UnsafeRawBufferPointer(bytes)
            var previous: UInt8 = 0
            var questionMark: Int?
            var offset = 0
            while offset < bytes.count {
                if offset &+ 8 <= bytes.count {
                    let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                    let special = notPlainTargetBytes(word)
                    // The lowest flag is the first byte that is not plain; those before it are.
                    let plain = special == 0 ? 8 : special.trailingZeroBitCount &>> 3
                    if plain > 0 {
                        offset &+= plain
                        previous = bytes[offset &- 1]
                        continue
                    }
                }
                let byte = bytes[offset]
                switch byte {
                case UInt8(ascii: "%"), UInt8(ascii: "#"):
                    return nil
                case UInt8(ascii: ".") where questionMark == nil && previous == UInt8(ascii: "/"):
                    return nil
                case UInt8(ascii: "?") where questionMark == nil:
                    questionMark = offset
                case _ where byte <= 0x20 || byte >= 0x7F:
                    return nil
                default:
                    break
                }
                previous = byte
                offset &+= 1
            }
            // An empty query (`/a?`) is dropped, which is a normalisation of its own.
            if let questionMark, questionMark == bytes.count - 1 { return nil }
            return .some(questionMark)
        }
        guard case .some(let questionMarkOffset) = questionMark else { return nil }
        return RequestTarget(description: text, questionMarkOffset: questionMarkOffset)
    }

    /// The bytes of `word` (loaded little-endian) that are not plain in a target, as ``ByteWord`` flags them: zero
    /// when all eight are plain, that is printable ASCII other than `%`, `#`, `.` and `?`.
    @inline(__always)
    static func notPlainTargetBytes(_ word: UInt64) -> UInt64 {
        ByteWord.nonASCIIBytes(word) | ByteWord.bytes(of: word, below: 0x21)
            | ByteWord.bytes(of: word, equalTo: 0x7F) | ByteWord.bytes(of: word, equalTo: UInt8(ascii: "%"))
            | ByteWord.bytes(of: word, equalTo: UInt8(ascii: "#"))
            | ByteWord.bytes(of: word, equalTo: UInt8(ascii: "."))
            | ByteWord.bytes(of: word, equalTo: UInt8(ascii: "?"))
    }

    private static func normalisePercentEncoding(_ bytes: ArraySlice<UInt8>) throws(InvalidTarget) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            guard byte > 0x20, byte < 0x7F else {
                throw InvalidTarget(reason: "the request target has a space, a control character or a non-ASCII byte")
            }
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                    let high = HTTPSyntax.hexValue(bytes[index + 1]), let low = HTTPSyntax.hexValue(bytes[index + 2])
                else {
                    throw InvalidTarget(reason: "the request target has a malformed percent-encoding")
                }
                let decoded = high << 4 | low
                if isUnreserved(decoded) {
                    result.append(decoded)
                } else {
                    result.append(UInt8(ascii: "%"))
                    result.append(upperHex(high))
                    result.append(upperHex(low))
                }
                index += 3
            } else {
                result.append(byte)
                index += 1
            }
        }
        return result
    }

    /// RFC 3986 section 5.2.4, on a path that starts with `/`.
    static func removeDotSegments(_ path: [UInt8]) -> String {
        var output: [ArraySlice<UInt8>] = []
        let segments = path.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        var trailingSlash = false
        for (position, segment) in segments.enumerated() {
            let isLast = position == segments.count - 1
            if segment.elementsEqual([UInt8(ascii: ".")]) {
                trailingSlash = isLast
            } else if segment.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                if !output.isEmpty { output.removeLast() }
                trailingSlash = isLast
            } else {
                output.append(segment)
                trailingSlash = false
            }
        }
        var result: [UInt8] = [UInt8(ascii: "/")]
        for (position, segment) in output.enumerated() {
            if position > 0 { result.append(UInt8(ascii: "/")) }
            result.append(contentsOf: segment)
        }
        if trailingSlash, !output.isEmpty { result.append(UInt8(ascii: "/")) }
        return String(decoding: result, as: UTF8.self)
    }

    /// RFC 3986's unreserved characters: letters, digits and `-._~`.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }

    private static func upperHex(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
    }
}
