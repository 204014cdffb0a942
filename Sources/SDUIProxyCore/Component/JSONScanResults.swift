/// What a ``JSONParser`` scan hands back, and reading the strings it found where they lie in the document.
extension JSONParser {
    /// An object a scan reports: where it starts in the document, how deep it sits (the root is level 0), and
    /// where its kept members lie in ``Scan/members``.
    struct ScannedObject {
        var offset: Int
        var depth: Int
        var members: Range<Int>
    }

    /// The objects a scan reports, in document order, and whether a limit left some of the document out.
    ///
    /// Everything a scan keeps is plain data about where things lie in the document: reading it takes the
    /// document's bytes, and keeping it costs no allocation per object.
    struct Scan {
        var objects: [ScannedObject]
        /// The kept members of the reported objects and of the objects kept under them (and possibly of objects
        /// that ended unreported before a reported one); each object's members lie together, in document order.
        var members: [KeptMember]
        var truncated: Bool
        /// Whether the root is an object with a non-empty string member named as the scan's `rootMember`.
        var rootHasMember: Bool

        /// The value of the member `key` (an index in the scan's ``KeySet``) among an object's kept members; the
        /// last one counts, as in a decoded object.
        func value(of key: Int, in object: Range<Int>) -> KeptValue? {
            for index in object.reversed() where members[index].key == key { return members[index].value }
            return nil
        }
    }

    /// The member names a scan keeps, with their UTF-8 bytes for comparing against a document's keys in place.
    struct KeySet: Sendable {
        let names: [String]
        let utf8: [[UInt8]]
        /// A bit for each name's shape (``shapeBit(count:first:last:)``: its length, first and last bytes), so that
        /// nearly all of a document's keys are turned away by one test. The length alone let through more than half
        /// of a screen's keys (`text` is as long as `body`), each then compared with the names of its length.
        let shapes: UInt64
        /// The names ordered by length, each with its first eight bytes as one word, so that a document's key
        /// is compared with only the names of its length, by one comparison when it is eight bytes or shorter.
        let slots: [Slot]
        /// Where the names of each length (`min(length, 63)`) start in `slots`, and where they end at the
        /// next entry: 65 entries.
        let slotStarts: [Int]

        struct Slot {
            var index: Int
            var count: Int
            var prefix: UInt64
        }

        /// No keys: what a parser starts with, made once (a set is a few arrays, and a parser is made per miss).
        static let none = KeySet([])

        init(_ names: [String]) {
            self.names = names
            let utf8 = names.map { Array($0.utf8) }
            self.utf8 = utf8
            self.shapes = utf8.reduce(0) {
                $0 | Self.shapeBit(count: $1.count, first: $1.first ?? 0, last: $1.last ?? 0)
            }
            let slots = utf8.indices.map { index in
                Slot(
                    index: index,
                    count: utf8[index].count,
                    prefix: utf8[index].prefix(8).enumerated().reduce(0) { $0 | UInt64($1.element) << (8 * $1.offset) }
                )
            }
            .sorted { (min($0.count, 63), $0.index) < (min($1.count, 63), $1.index) }
            self.slots = slots
            self.slotStarts = (0...64).map { bucket in slots.firstIndex { min($0.count, 63) >= bucket } ?? slots.count }
        }

        /// One of 64 bits for a name `count` bytes long that starts with `first` and ends with `last` (both 0 for
        /// the empty name).
        @inline(__always)
        static func shapeBit(count: Int, first: UInt8, last: UInt8) -> UInt64 {
            1 &<< (UInt64(truncatingIfNeeded: count &+ Int(first) &* 7 &+ Int(last) &* 13) & 63)
        }
    }

    /// A kept member: its key's index in the scan's ``KeySet``, and its value.
    struct KeptMember {
        var key: Int
        var value: KeptValue
    }

    /// A kept member's value: strings where they lie in the document, objects as the range of their own kept
    /// members in ``Scan/members``, and arrays and numbers without their content (the planner reads neither;
    /// array elements are still scanned for what they report).
    enum KeptValue {
        case string(StringSpan)
        case number
        case bool(Bool)
        case null
        case object(Range<Int>)
        case array
    }

    /// Where a string's content lies in the document, and whether it needs unescaping.
    struct StringSpan {
        var range: Range<Int>
        var hasEscapes: Bool
    }

    /// A string's value, read from the document `bytes` where a scan found it.
    static func text(of string: StringSpan, in bytes: UnsafeRawBufferPointer) -> String {
        string.hasEscapes
            ? unescape(string.range, in: bytes)
            : String(decoding: UnsafeRawBufferPointer(rebasing: bytes[string.range]), as: UTF8.self)
    }

    /// Whether a string in the document `bytes` is `lowercased`, ignoring ASCII case; read in place unless it
    /// has escapes.
    static func spells(
        _ string: StringSpan,
        in bytes: UnsafeRawBufferPointer,
        ignoringCase lowercased: StaticString
    ) -> Bool {
        if string.hasEscapes { return HTTPSyntax.equalsIgnoringCase(text(of: string, in: bytes), lowercased) }
        return HTTPSyntax.equalsIgnoringCase(bytes: bytes[string.range], lowercased)
    }

    private static func unescape(_ range: Range<Int>, in bytes: UnsafeRawBufferPointer) -> String {
        var scalars = String.UnicodeScalarView()
        var utf8: [UInt8] = []
        var position = range.lowerBound
        func flush() {
            if !utf8.isEmpty {
                scalars.append(contentsOf: String(decoding: utf8, as: UTF8.self).unicodeScalars)
                utf8.removeAll(keepingCapacity: true)
            }
        }
        while position < range.upperBound {
            let byte = bytes[position]
            guard byte == UInt8(ascii: "\\") else {
                utf8.append(byte)
                position += 1
                continue
            }
            flush()
            let escaped = bytes[position + 1]
            position += 2
            switch escaped {
            case UInt8(ascii: "b"): scalars.append("\u{8}")
            case UInt8(ascii: "f"): scalars.append("\u{C}")
            case UInt8(ascii: "n"): scalars.append("\n")
            case UInt8(ascii: "r"): scalars.append("\r")
            case UInt8(ascii: "t"): scalars.append("\t")
            case UInt8(ascii: "u"):
                var code = readHex4(at: position, in: bytes)
                position += 4
                if (0xD800..<0xDC00).contains(code), position + 6 <= range.upperBound,
                    bytes[position] == UInt8(ascii: "\\"),
                    bytes[position + 1] == UInt8(ascii: "u")
                {
                    let low = readHex4(at: position + 2, in: bytes)
                    if (0xDC00..<0xE000).contains(low) {
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        position += 6
                    }
                }
                scalars.append(Unicode.Scalar(code) ?? "\u{FFFD}")
            default: scalars.append(Unicode.Scalar(escaped))
            }
        }
        flush()
        return String(scalars)
    }

    private static func readHex4(at position: Int, in bytes: UnsafeRawBufferPointer) -> UInt32 {
        var value: UInt32 = 0
        for offset in 0..<4 { value = value << 4 | UInt32(HTTPSyntax.hexValue(bytes[position + offset]) ?? 0) }
        return value
    }
}
