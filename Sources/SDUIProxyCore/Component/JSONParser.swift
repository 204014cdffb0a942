/// A strict JSON parser (RFC 8259) over raw bytes, for the miss path: it validates a document in one pass and
/// keeps only where the members it is asked for lie, never a tree.
///
/// Nesting is limited to ``maximumDepth`` so hostile documents cannot exhaust the stack; strings must be valid
/// UTF-8 with no raw control characters; numbers follow the JSON grammar exactly.
struct JSONParser {
    struct Failure: Error {
        var reason: String
        var offset: Int
    }

    static let maximumDepth = 512

    // Not private: the tokens are read in `JSONParser+Tokens.swift`.
    let bytes: UnsafeRawBufferPointer
    /// `bytes` as a start and a length, read without the optional start and the bounds checks of a buffer
    /// pointer: every read is guarded by `index < end` (or `+ 8 <= end`, `+ 16 <= end`) already.
    let base: UnsafeRawPointer
    let end: Int
    var index = 0
    /// What a ``scanObjects(_:keeping:reporting:maximumDepth:maximumCount:)`` keeps and has found so far.
    private var reduction: Reduction

    /// Made with its reduction whole: a parser made with an empty one and given another copied the key set's four
    /// arrays twice, retaining and releasing each, on every miss.
    private init(bytes: UnsafeRawBufferPointer, reduction: Reduction) {
        self.bytes = bytes
        self.reduction = reduction
        // An empty buffer may have no start; nothing is ever read from it (`end` is 0), so any address does.
        self.base = bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 8).unsafelyUnwrapped
        self.end = bytes.count
    }

    /// Checks that `bytes` are one JSON document whose root is an object with a non-empty string member
    /// named `requiredKey`, without building anything else.
    static func validateObject(
        _ bytes: UnsafeRawBufferPointer,
        requiringStringMember requiredKey: String
    )
        throws(Failure) -> Bool
    {
        var parser = JSONParser(
            bytes: bytes,
            reduction: Reduction(
                keys: KeySet.none,
                markerIndex: nil,
                maximumDepth: 0,
                maximumCount: 0,
                rootMember: requiredKey
            )
        )
        parser.skipWhitespace()
        guard parser.peek() == UInt8(ascii: "{") else {
            try parser.skipValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == parser.end else { throw parser.failure("text after the document") }
            return false
        }
        var found = false
        parser.index &+= 1
        parser.skipWhitespace()
        if parser.peek() == UInt8(ascii: "}") {
            parser.index &+= 1
        } else {
            while true {
                parser.skipWhitespace()
                let key = try parser.scanString()
                parser.skipWhitespace()
                try parser.expect(UInt8(ascii: ":"))
                parser.skipWhitespace()
                if parser.isRootMember(key), parser.peek() == UInt8(ascii: "\"") {
                    found = try !parser.scanString().range.isEmpty
                } else {
                    try parser.skipValue(depth: 1)
                }
                parser.skipWhitespace()
                guard let next = parser.next() else { throw parser.failure("the document ends inside an object") }
                if next == UInt8(ascii: "}") { break }
                guard next == UInt8(ascii: ",") else { throw parser.failure("expected , or } in an object") }
            }
        }
        parser.skipWhitespace()
        guard parser.index == parser.end else { throw parser.failure("text after the document") }
        return found
    }

    // MARK: Scanning for objects

    private struct Reduction {
        var keys: KeySet
        /// The index in `keys` of the key that marks an object to report, or nil when no kept key does.
        var markerIndex: Int?
        var maximumDepth: Int
        var maximumCount: Int
        let rootMember: String
        /// The root member's length in bytes, which settles most root keys without reaching for its string.
        let rootMemberCount: Int
        /// The kept members of the objects being scanned, the innermost object's last: an object appends its
        /// members as it reads them and drops them when it ends, so an object that is not reported or kept costs
        /// nothing.
        var pending: [KeptMember] = []
        /// The members of the reported and kept objects that have ended (``Scan/members``).
        var kept: [KeptMember] = []
        /// How many of `kept` the reported objects (and what they keep) refer to; the rest belongs to objects
        /// still open, or to nothing once the object that kept it ends unreported.
        var keptInUse = 0
        var objects: [ScannedObject] = []
        var truncated = false
        var rootHasMember = false

        init(keys: KeySet, markerIndex: Int?, maximumDepth: Int, maximumCount: Int, rootMember: String) {
            self.keys = keys
            self.markerIndex = markerIndex
            self.maximumDepth = maximumDepth
            self.maximumCount = maximumCount
            self.rootMember = rootMember
            self.rootMemberCount = rootMember.utf8.count
        }
    }

    /// Validates a whole document like ``parse(_:)`` without building it, and reports the objects that have a
    /// string member named `markerKey`.
    ///
    /// A reported object keeps only its members named in `keys` (see ``KeptValue``): strings where they lie,
    /// objects reduced the same way, numbers and arrays without their content (array elements are scanned, not
    /// kept). What an object that is neither reported nor kept held is let go when it ends, so a scan holds what
    /// it reports and what the objects open around its position keep. Objects nested deeper than
    /// `maximumDepth` levels are not reported (but are kept in full under an object that is), reporting stops
    /// after `maximumCount` objects, and ``Scan/truncated`` says when either limit left something out.
    ///
    /// The same pass checks what ``validateObject(_:requiringStringMember:)`` checks, for `rootMember`.
    static func scanObjects(
        _ bytes: UnsafeRawBufferPointer,
        keeping keys: KeySet,
        reporting markerKey: String,
        maximumDepth: Int,
        maximumCount: Int,
        rootMember: String = ""
    ) throws(Failure) -> Scan {
        var storage = JSONScanStorage()
        return try scanObjects(
            bytes,
            keeping: keys,
            reporting: markerKey,
            maximumDepth: maximumDepth,
            maximumCount: maximumCount,
            rootMember: rootMember,
            storage: &storage
        )
    }

    /// ``scanObjects(_:keeping:reporting:maximumDepth:maximumCount:rootMember:)`` into the arrays `storage` holds,
    /// which the scan's ``Scan/objects`` and ``Scan/members`` then are; ``JSONScanStorage/reclaim(_:)`` takes them
    /// back once the scan has been read. A scan that fails gives them back itself.
    static func scanObjects(
        _ bytes: UnsafeRawBufferPointer,
        keeping keys: KeySet,
        reporting markerKey: String,
        maximumDepth: Int,
        maximumCount: Int,
        rootMember: String = "",
        storage: inout JSONScanStorage
    ) throws(Failure) -> Scan {
        var parser = JSONParser(
            bytes: bytes,
            reduction: Reduction(
                keys: keys,
                markerIndex: keys.names.firstIndex(of: markerKey),
                maximumDepth: maximumDepth,
                maximumCount: maximumCount,
                rootMember: rootMember
            )
        )
        storage.lend(&parser.reduction.pending, &parser.reduction.kept, &parser.reduction.objects)
        do throws(Failure) {
            parser.skipWhitespace()
            try parser.skipValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == parser.end else { throw parser.failure("text after the document") }
        } catch {
            // All three go back, with whatever the objects the scan was in held: the storage empties them.
            storage.takeBack(&parser.reduction.pending, &parser.reduction.kept, &parser.reduction.objects)
            throw error
        }
        // The pending members go back now (every object has ended, so there are none); the others with the scan.
        storage.takeBack(pending: &parser.reduction.pending)
        // Objects are complete, so found, innermost first; document order is where they start.
        parser.reduction.objects.sort { $0.offset < $1.offset }
        return Scan(
            objects: parser.reduction.objects,
            members: parser.reduction.kept,
            truncated: parser.reduction.truncated,
            rootHasMember: parser.reduction.rootHasMember
        )
    }

    /// The index of the kept key a document's key spells, if any.
    ///
    /// `mutating` though it changes nothing: a non-mutating call from the mutating scan copies the parser first,
    /// retaining and releasing each of its arrays, once for every key of the document.
    @inline(__always)
    private mutating func keptKey(_ key: StringSpan) -> Int? {
        if key.hasEscapes { return reduction.keys.names.firstIndex(of: text(of: key)) }
        let start = key.range.lowerBound
        let count = key.range.upperBound &- start
        let bucket = min(count, 63)
        let firstByte = count > 0 ? byte(at: start) : 0
        let lastByte = count > 0 ? byte(at: start &+ count &- 1) : 0
        guard reduction.keys.shapes & KeySet.shapeBit(count: count, first: firstByte, last: lastByte) != 0 else {
            return nil
        }
        // The key's first eight bytes (all of it when shorter, zero above), as the slots hold them.
        var prefix: UInt64 = 0
        if start &+ 8 <= end {
            prefix = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: start, as: UInt64.self))
            if count < 8 { prefix &= (1 &<< UInt64(count &* 8)) &- 1 }
        } else {
            for offset in 0..<min(count, 8) { prefix |= UInt64(byte(at: start &+ offset)) &<< UInt64(offset &* 8) }
        }
        var slot = reduction.keys.slotStarts[bucket]
        let last = reduction.keys.slotStarts[bucket &+ 1]
        while slot < last {
            let candidate = reduction.keys.slots[slot]
            slot &+= 1
            guard candidate.prefix == prefix, candidate.count == count else { continue }
            if count <= 8 { return candidate.index }
            let rest = reduction.keys.utf8[candidate.index].withUnsafeBufferPointer { name in
                var offset = 8
                while offset < count, name[offset] == byte(at: start &+ offset) { offset &+= 1 }
                return offset == count
            }
            if rest { return candidate.index }
        }
        return nil
    }

    /// Whether `key` spells the scan's root member (compared unescaped, like any key). `mutating` for the
    /// reason ``keptKey(_:)`` is.
    private mutating func isRootMember(_ key: StringSpan) -> Bool {
        guard reduction.rootMemberCount > 0 else { return false }
        if key.hasEscapes { return text(of: key).utf8.elementsEqual(reduction.rootMember.utf8) }
        // Lengths first, then the bytes in place: the generic comparison with a `String.UTF8View` cost a few
        // hundred instructions per root key, and reaching for the member's string to measure it about 70.
        guard key.range.count == reduction.rootMemberCount else { return false }
        let spelled = UnsafeRawBufferPointer(rebasing: bytes[key.range])
        let expected = reduction.rootMember
        return expected.utf8.withContiguousStorageIfAvailable { expected in
            for index in 0..<expected.count where spelled[index] != expected[index] { return false }
            return true
        } ?? spelled.elementsEqual(expected.utf8)
    }

    /// Steps over a value nobody keeps, validating it; the objects in it are still scanned for what they report.
    private mutating func skipValue(depth: Int) throws(Failure) {
        guard depth < Self.maximumDepth else { throw failure("nested deeper than \(Self.maximumDepth) levels") }
        guard let byte = peek() else { throw failure("a value is missing") }
        switch byte {
        case UInt8(ascii: "{"): _ = try reduceObject(depth: depth, keep: false)
        case UInt8(ascii: "["): try skipArray(depth: depth)
        case UInt8(ascii: "\""): _ = try scanString()
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try scanNumber()
        case 0x20, 0x09, 0x0A, 0x0D:
            // White space before an array's element (``skipArray(depth:)`` leaves it to be stepped over here).
            skipWhitespace()
            try skipValue(depth: depth)
        default: _ = try scanLiteral()
        }
    }

    /// ``skipValue(depth:)`` for a member's value or an array's element, with the two most common kinds, strings
    /// and objects, read without the call to `skipValue` between.
    @inline(__always)
    private mutating func skipElement(depth: Int) throws(Failure) {
        if depth < Self.maximumDepth, index < end {
            switch byte(at: index) {
            case UInt8(ascii: "\""):
                _ = try scanString()
                return
            case UInt8(ascii: "{"):
                _ = try reduceObject(depth: depth, keep: false)
                return
            default: break
            }
        }
        try skipValue(depth: depth)
    }

    /// A kept member's value (see ``KeptValue``); objects are reduced to what they keep.
    private mutating func keptValue(depth: Int) throws(Failure) -> KeptValue {
        guard depth < Self.maximumDepth else { throw failure("nested deeper than \(Self.maximumDepth) levels") }
        guard let byte = peek() else { throw failure("a value is missing") }
        switch byte {
        case UInt8(ascii: "{"): return try reduceObject(depth: depth, keep: true) ?? .object(0..<0)
        case UInt8(ascii: "["):
            try skipArray(depth: depth)
            return .array
        case UInt8(ascii: "\""): return .string(try scanString())
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            try scanNumber()
            return .number
        default:
            return try scanLiteral()
        }
    }

    private mutating func skipArray(depth: Int) throws(Failure) {
        if depth > reduction.maximumDepth { reduction.truncated = true }
        index &+= 1
        skipWhitespace()
        if peek() == UInt8(ascii: "]") {
            index &+= 1
            return
        }
        // White space before an element is stepped over where the element is read, and after it where the `,` or
        // `]` is: a document written without any pays no test of its own for it.
        while true {
            try skipElement(depth: depth &+ 1)
            guard let next = nextSkippingWhitespace() else { throw failure("the document ends inside an array") }
            if next == UInt8(ascii: "]") { return }
            guard next == UInt8(ascii: ",") else { throw failure("expected , or ] in an array") }
        }
    }

    /// Steps over an object, keeping its members named in the scan's keys when it is reported or `keep` is set;
    /// returns what it kept when `keep` is set.
    private mutating func reduceObject(depth: Int, keep: Bool) throws(Failure) -> KeptValue? {
        let start = index
        let inReach = depth <= reduction.maximumDepth
        if !inReach { reduction.truncated = true }
        // A kept object is reduced at any depth, so an object in reach sees all it keeps.
        let reduces = inReach || keep
        let firstMember = reduction.pending.count
        let firstKept = reduction.kept.count
        index &+= 1
        skipWhitespace()
        if peek() == UInt8(ascii: "}") {
            index &+= 1
        } else {
            // White space before a key is stepped over where the key is read, and after a value where the `,` or
            // `}` is, as in an array.
            while true {
                let key = try scanString()
                try expectColon()
                if depth == 0, isRootMember(key), peek() == UInt8(ascii: "\"") {
                    if try !scanString().range.isEmpty { reduction.rootHasMember = true }
                } else if reduces, let kept = keptKey(key) {
                    let value = try keptValue(depth: depth + 1)
                    reduction.pending.append(KeptMember(key: kept, value: value))
                } else {
                    try skipElement(depth: depth &+ 1)
                }
                guard let next = nextSkippingWhitespace() else { throw failure("the document ends inside an object") }
                if next == UInt8(ascii: "}") { break }
                guard next == UInt8(ascii: ",") else { throw failure("expected , or } in an object") }
            }
        }
        let memberCount = reduction.pending.count - firstMember
        let reported = memberCount > 0 && inReach && hasStringMarker(from: firstMember)
        if reported, reduction.objects.count >= reduction.maximumCount { reduction.truncated = true }
        let reports = reported && reduction.objects.count < reduction.maximumCount
        var members = 0..<0
        if reports || keep {
            members = reduction.kept.count..<(reduction.kept.count + memberCount)
            // Element by element: appending the slice retained and released the array around a generic copy.
            for index in firstMember..<reduction.pending.count { reduction.kept.append(reduction.pending[index]) }
        } else {
            // Nothing refers to what this object's members kept any more, except the objects reported meanwhile:
            // so a scan holds what it reports and the objects open around the current one, not the document.
            let inUse = max(firstKept, reduction.keptInUse)
            // One at a time: `removeLast(_:)` is a generic range replacement, dearer than the few members it drops.
            while reduction.kept.count > inUse { reduction.kept.removeLast() }
        }
        for _ in 0..<memberCount { reduction.pending.removeLast() }
        if reports {
            reduction.objects.append(ScannedObject(offset: start, depth: depth, members: members))
            reduction.keptInUse = reduction.kept.count
        }
        return keep ? .object(members) : nil
    }

    /// Whether the marker is among the pending members from `firstMember` on, as a string (the last one counts,
    /// as in a decoded object). `mutating` for the reason ``keptKey(_:)`` is.
    private mutating func hasStringMarker(from firstMember: Int) -> Bool {
        guard let marker = reduction.markerIndex,
            let last = reduction.pending[firstMember...].lastIndex(where: { $0.key == marker })
        else { return false }
        if case .string = reduction.pending[last].value { return true }
        return false
    }
}
