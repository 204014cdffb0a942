import NIOHTTP1

/// A request's fields edited by name, as the proxy builds a request to the backend: the platform header, the
/// forwarding fields, the request id, conditionals and ranges.
///
/// Names and values are checked when the fields are written to the wire
/// (``HTTPWireFormat/encodeRequest(method:target:host:fields:framing:body:)``), not here: the one place every
/// request passes. Fields sent again and again are checked once instead (``HTTPFieldLines/checkForWire()``), and
/// the encoder checks only the rest.
extension HTTPFieldLines {
    /// Adds `name: value` after the fields there are.
    public mutating func add(name: String, value: String) {
        name.withContiguousUTF8 { name in
            value.withContiguousUTF8 { value in
                append(name: UnsafeRawBufferPointer(name), value: UnsafeRawBufferPointer(value))
            }
        }
    }

    /// Adds a field whose name is a literal.
    public mutating func add(name: StaticString, value: String) {
        value.withContiguousUTF8 { value in
            append(name: name.rawBytes, value: UnsafeRawBufferPointer(value))
        }
    }

    /// Adds a field whose name and value are literals.
    public mutating func add(name: StaticString, value: StaticString) {
        append(name: name.rawBytes, value: value.rawBytes)
    }

    /// Removes every field named `name`, in any letter case; a list without one is left as it is, uncopied.
    public mutating func remove(name: String) {
        name.withContiguousUTF8 { remove(named: UnsafeRawBufferPointer($0)) }
    }

    /// Replaces the fields named `name` with one, `name: value`, after the others.
    public mutating func replaceOrAdd(name: String, value: String) {
        remove(name: name)
        add(name: name, value: value)
    }

    /// The first value of the fields named `name`, in any letter case.
    public func first(name: String) -> String? {
        name.withContiguousUTF8 { name in
            withFirstValue(named: UnsafeRawBufferPointer(name)) { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Whether a field is named `name`, in any letter case.
    public func contains(name: String) -> Bool {
        name.withContiguousUTF8 { name in withFirstValue(named: UnsafeRawBufferPointer(name)) { _ in true } } ?? false
    }
}
