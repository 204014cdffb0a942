import NIOHTTP1

/// A message's header fields as bytes: each name and value, in order, read in place by name. A backend's answer as
/// it was sent, and a request to the backend as the proxy builds it.
///
/// A cache fill reads a handful of fields by name and copies the rest into its entry's encoded head; as strings
/// (`HTTPHeaders`), every value over 15 bytes was an allocation of its own, and every lookup, copy and release of
/// the list a reference count on each. Here they are two arrays, whatever their number. The paths that want a
/// collection (a 304 merged into an entry, a response passed on unstored) ask for ``headers``. A request to the
/// backend is built here for the same reason: its lines are copied to the wire as they lie, where a collection
/// handed out every name and value retained, twice, to be measured and then written.
///
/// Names are looked up ignoring the case they were sent in: by a lower-case literal (`first("etag")`), or by any
/// spelling (`first(name:)`, `remove(name:)`). A removed field's bytes
/// stay where they were (only its place in the order goes), so ``byteCount`` bounds the fields' bytes from above.
public struct HTTPFieldLines: Sendable {
    /// Where one field's name and value lie in ``bytes``. Offsets of 32 bits: a head is bounded far below that.
    private struct Field: Sendable {
        var nameStart: UInt32
        var nameCount: UInt32
        var valueStart: UInt32
        var valueCount: UInt32

        var nameRange: Range<Int> { Int(nameStart)..<Int(nameStart + nameCount) }
        var valueRange: Range<Int> { Int(valueStart)..<Int(valueStart + valueCount) }
    }

    /// Every field's name and value bytes: back to back when appended one by one, or the parsed head's field
    /// lines as they came, separators and all, copied whole. Only the first ``byteCount`` are in use: the rest is
    /// room for the next appends, which copy into it in place.
    private var bytes: [UInt8] = []
    /// How many of `bytes` hold fields.
    private var used = 0
    private var fields: [Field] = []
    /// How many of the first fields are known to have a token for a name and a value HTTP allows
    /// (``checkForWire()``), so that writing them to the wire checks them no second time. Fields appended after
    /// them are not known to be; a removal counts the ones that stay.
    private(set) var wireCheckedCount = 0

    public init() {}

    /// Room for `fieldCount` fields of `byteCount` bytes in all, so that appends allocate once.
    init(reservingFields fieldCount: Int, bytes byteCount: Int) {
        fields.reserveCapacity(fieldCount)
        // Not `Array(repeating:count:)`, nor `Array(unsafeUninitializedCapacity:)`: both allocate through the
        // standard library's unspecialized path, which looks the storage's type up at run time, about 350
        // instructions a request more than this. Zeroing a head's few hundred bytes costs little beside it.
        bytes = Array(repeatElement(0, count: byteCount))
    }

    /// The fields of `headers`, for backends whose client hands over a collection.
    public init(_ headers: HTTPHeaders) {
        var byteCount = 0
        for (name, value) in headers { byteCount += name.utf8.count + value.utf8.count }
        self.init(reservingFields: headers.count, bytes: byteCount)
        for (name, value) in headers {
            name.withContiguousUTF8 { name in
                value.withContiguousUTF8 { value in
                    append(name: UnsafeRawBufferPointer(name), value: UnsafeRawBufferPointer(value))
                }
            }
        }
    }

    /// Adds a field. Nothing is checked here: a request's fields are checked where they are written to the wire
    /// (``HTTPWireFormat/encodeRequest(method:target:host:fields:framing:body:)``) or ahead of it
    /// (``checkForWire()``), a backend's as they are parsed.
    ///
    /// The bytes are copied into room already there: two array appends a field (each a generic copy with its
    /// capacity and uniqueness checks) cost a forwarded request's fields about 600 instructions more.
    @inline(__always)
    mutating func append(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        append(name: name, valueCapacity: value.count) { out in
            UnsafeMutableRawBufferPointer(rebasing: out[0..<value.count]).copyMemory(from: value)
            return value.count
        }
    }

    /// Adds a field named `name` whose value `writeValue` writes into the room it is given, at most
    /// `valueCapacity` bytes, returning how many it wrote; the caller has checked the name and the value.
    @inline(__always)
    mutating func append(
        name: UnsafeRawBufferPointer,
        valueCapacity: Int,
        writeValue: (UnsafeMutableRawBufferPointer) -> Int
    ) {
        let start = used
        let valueStart = start + name.count
        let capacityEnd = valueStart + valueCapacity
        if capacityEnd > bytes.count {
            precondition(capacityEnd < Int(UInt32.max), "fields of 4 GiB")
            // Doubled at least, as an array grows.
            bytes.append(contentsOf: repeatElement(0, count: max(capacityEnd - bytes.count, bytes.count)))
        }
        let valueCount = bytes.withUnsafeMutableBytes { out in
            UnsafeMutableRawBufferPointer(rebasing: out[start..<valueStart]).copyMemory(from: name)
            return writeValue(UnsafeMutableRawBufferPointer(rebasing: out[valueStart..<capacityEnd]))
        }
        precondition(valueCount <= valueCapacity, "a value written past its room")
        used = valueStart + valueCount
        fields.append(
            Field(
                nameStart: UInt32(start),
                nameCount: UInt32(name.count),
                valueStart: UInt32(valueStart),
                valueCount: UInt32(valueCount)
            )
        )
    }

    /// Holds `block`, a head's field lines, in one copy, for fields added with ``appendField(name:value:in:)``:
    /// a parser's appends copied each name and value on its own, two array appends and their checks a field.
    init(copying block: UnsafeRawBufferPointer, reservingFields fieldCount: Int) {
        precondition(block.count < Int(UInt32.max), "a head of 4 GiB")
        bytes = Array(block)
        used = block.count
        fields.reserveCapacity(fieldCount)
    }

    /// Adds the field whose `name` and `value` lie in `block`, the bytes this was made ``init(copying:reservingFields:)``
    /// from; the caller has checked them.
    mutating func appendField(
        name: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        in block: UnsafeRawBufferPointer
    ) {
        guard let base = block.baseAddress, let nameStart = name.baseAddress else { return }
        // An empty value may have no address of its own: it lies where the name's line ends.
        let valueStart = value.baseAddress.map { $0 - base } ?? (nameStart - base + name.count)
        fields.append(
            Field(
                nameStart: UInt32(nameStart - base),
                nameCount: UInt32(name.count),
                valueStart: UInt32(valueStart),
                valueCount: UInt32(value.count)
            )
        )
    }

    public var count: Int { fields.count }

    /// The bytes held: every name's and value's, and for lines parsed whole the separators between them, so at
    /// least the names and values together.
    public var byteCount: Int { used }

    /// The name and value bytes of every field, in the order they came.
    public func forEachField(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Void) {
        bytes.withUnsafeBytes { bytes in
            for field in fields {
                body(
                    UnsafeRawBufferPointer(rebasing: bytes[field.nameRange]),
                    UnsafeRawBufferPointer(rebasing: bytes[field.valueRange])
                )
            }
        }
    }

    /// Copies the line (`name: value` and CRLF) of every field whose name `keeps` passes to `out` from `offset`, in
    /// order; `out` has room for every field's line. Returns the offset after the last line copied.
    public func copyLines(
        to out: UnsafeMutableRawBufferPointer,
        at offset: Int,
        where keeps: (_ name: UnsafeRawBufferPointer) -> Bool
    ) -> Int {
        bytes.withUnsafeBytes { bytes in
            var offset = offset
            for field in fields {
                let name = UnsafeRawBufferPointer(rebasing: bytes[field.nameRange])
                guard keeps(name) else { continue }
                offset = HTTPWireFormat.copyLine(
                    name,
                    UnsafeRawBufferPointer(rebasing: bytes[field.valueRange]),
                    to: out,
                    at: offset
                )
            }
            return offset
        }
    }

    /// The value bytes of every field named `name` (lower-case), in order.
    public func forEachValue(of name: StaticString, _ body: (_ value: UnsafeRawBufferPointer) -> Void) {
        bytes.withUnsafeBytes { bytes in
            for field in fields where field.nameCount == name.utf8CodeUnitCount {
                guard HTTPSyntax.equalsIgnoringCase(bytes: bytes[field.nameRange], name) else { continue }
                body(UnsafeRawBufferPointer(rebasing: bytes[field.valueRange]))
            }
        }
    }

    /// Whether the first field named `name` (lower-case) has a value `test` accepts, read in place; false when
    /// there is none.
    ///
    /// Not generic, so that the proxy's other module calls it as compiled here: ``withFirstValue(of:_:)`` runs
    /// unspecialized from there, and looked `Optional`'s type up at run time on every fill (about 330
    /// instructions).
    public func firstValue(of name: StaticString, satisfies test: (_ value: UnsafeRawBufferPointer) -> Bool) -> Bool {
        withFirstValue(of: name, test) ?? false
    }

    /// `read` applied to the first field named `name` (lower-case), in place; nil when there is none.
    func withFirstValue<Result>(
        of name: StaticString,
        _ read: (_ value: UnsafeRawBufferPointer) -> Result
    ) -> Result? {
        bytes.withUnsafeBytes { bytes in
            for field in fields where field.nameCount == name.utf8CodeUnitCount {
                guard HTTPSyntax.equalsIgnoringCase(bytes: bytes[field.nameRange], name) else { continue }
                return read(UnsafeRawBufferPointer(rebasing: bytes[field.valueRange]))
            }
            return nil
        }
    }

    /// `read` applied to the first field named `name`, in any letter case, in place; nil when there is none.
    func withFirstValue<Result>(
        named name: UnsafeRawBufferPointer,
        _ read: (_ value: UnsafeRawBufferPointer) -> Result
    ) -> Result? {
        bytes.withUnsafeBytes { bytes in
            for field in fields where Int(field.nameCount) == name.count {
                let fieldName = UnsafeRawBufferPointer(rebasing: bytes[field.nameRange])
                guard HTTPSyntax.sameIgnoringCase(bytes: fieldName, name) else { continue }
                return read(UnsafeRawBufferPointer(rebasing: bytes[field.valueRange]))
            }
            return nil
        }
    }

    /// Removes every field named `name`, in any letter case. The list is only written to when one is: a request's
    /// fields are shared with the request they were copied from until then.
    mutating func remove(named name: UnsafeRawBufferPointer) {
        let isNamed = { (bytes: UnsafeRawBufferPointer, field: Field) in
            Int(field.nameCount) == name.count
                && HTTPSyntax.sameIgnoringCase(bytes: UnsafeRawBufferPointer(rebasing: bytes[field.nameRange]), name)
        }
        let held = bytes
        held.withUnsafeBytes { bytes in
            guard fields.contains(where: { isNamed(bytes, $0) }) else { return }
            // The checked fields that stay are still the first ones, fewer by those removed among them.
            wireCheckedCount -= fields[..<wireCheckedCount].count { isNamed(bytes, $0) }
            fields.removeAll { isNamed(bytes, $0) }
        }
    }

    /// Checks the fields not checked yet, in order, as ``HTTPWireFormat`` checks a request's before writing them,
    /// and counts those that pass up to the first that does not (``wireCheckedCount``).
    ///
    /// For fields written to the wire more than once: a connection's repeated upstream fields
    /// (``RepeatedUpstreamFields``) are checked once, when they are kept, rather than on every request.
    mutating func checkForWire() {
        bytes.withUnsafeBytes { bytes in
            while wireCheckedCount < fields.count {
                let field = fields[wireCheckedCount]
                guard
                    HTTPWireFormat.isWireField(
                        name: UnsafeRawBufferPointer(rebasing: bytes[field.nameRange]),
                        value: UnsafeRawBufferPointer(rebasing: bytes[field.valueRange])
                    )
                else { return }
                wireCheckedCount += 1
            }
        }
    }

    /// Whether a field is named `name` (lower-case).
    public func contains(_ name: StaticString) -> Bool {
        withFirstValue(of: name) { _ in true } ?? false
    }

    /// The first value of the fields named `name` (lower-case).
    public func first(_ name: StaticString) -> String? {
        withFirstValue(of: name) { String(decoding: $0, as: UTF8.self) }
    }

    /// The first field named `name` (lower-case) as an HTTP date, in seconds; nil when there is none or it is
    /// not a date.
    public func date(_ name: StaticString) -> Int64? {
        withFirstValue(of: name) { HTTPDate.parse(bytes: $0) } ?? nil
    }

    /// The members of the comma-separated lists (RFC 9110 section 5.6.1) in the fields named `name`
    /// (lower-case), across lines, without the whitespace around them; empty members are skipped.
    public func forEachListMember(of name: StaticString, _ body: (_ member: UnsafeRawBufferPointer) -> Void) {
        forEachValue(of: name) { value in
            for member in value.split(separator: UInt8(ascii: ",")) {
                let trimmed = HTTPSyntax.trimmingOptionalWhitespace(member)
                if !trimmed.isEmpty { body(UnsafeRawBufferPointer(rebasing: trimmed)) }
            }
        }
    }

    /// The fields as a collection, for the paths that merge or pass on a response's headers, keep a request (the
    /// write queue) or compare one (tests).
    public var headers: HTTPHeaders {
        var list: [(String, String)] = []
        list.reserveCapacity(fields.count)
        forEachField { name, value in
            list.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
        }
        return HTTPHeaders(list)
    }
}
