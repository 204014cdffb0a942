import NIOHTTP1

extension HTTPHeaders {
    /// Whether `other` is this very collection: the same bits. `HTTPHeaders` is a list held in copy-on-write
    /// storage and a keep-alive state, so the same bits are the same storage and the same state; while this value
    /// is held (as the connections' records of their last head hold theirs), that storage is neither written in
    /// place nor freed and its address reused, so the same bits are the same fields. Collections that are equal but
    /// stored apart are not told the same: callers compare those field by field, or read them anew.
    ///
    /// A repeated head is handed the last head's collection itself (``RepeatedRequestFields``); reading its fields
    /// to compare them (each name and value retained and released) cost about 1,400 instructions a request.
    func hasSameRepresentation(as other: HTTPHeaders) -> Bool {
        withUnsafeBytes(of: self) { a in withUnsafeBytes(of: other) { b in ByteSearch.same(a, b) } }
    }
}
