extension StringProtocol {
    /// Calls `body` with the text's UTF-8 bytes in contiguous memory, where native and small strings keep them.
    ///
    /// A loop over `utf8` itself steps a `String.Index` through the view a byte at a time, which costs several
    /// times a loop over the bytes; the checks that run on every request (header names and values, targets,
    /// prefetch URLs) read the bytes this way instead. Text without contiguous UTF-8 is copied first.
    @inlinable
    public func withContiguousUTF8<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        if let result = try utf8.withContiguousStorageIfAvailable(body) { return result }
        var copy = String(self)
        return try copy.withUTF8(body)
    }
}

extension StaticString {
    /// The literal's UTF-8 bytes where the binary keeps them (valid for the program's life), for the writers and
    /// comparisons that copy or read a literal in place.
    @inlinable
    public var rawBytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: utf8Start, count: utf8CodeUnitCount)
    }
}
