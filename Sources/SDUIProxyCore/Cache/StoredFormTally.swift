/// The body bytes of a cache shard's stored responses in each form, and how many have a coded form: counted as
/// responses come and go, under the shard's lock, so the statistics read them without visiting every entry.
struct StoredFormTally {
    var identity = 0
    var brotli = 0
    var gzip = 0
    var compressedEntries = 0

    /// Counts `slot`'s forms in (`sign` 1) or out (-1).
    mutating func count(_ slot: ResponseCache.Slot?, _ sign: Int) {
        guard case .response(let entry)? = slot else { return }
        identity += sign * entry.bodyLength
        if !entry.encodedForms.isEmpty { compressedEntries += sign }
        for form in entry.encodedForms {
            switch form.coding {
            case .br?: brotli += sign * form.bodyLength
            case .gzip?: gzip += sign * form.bodyLength
            case .deflate?, nil: break
            }
        }
    }
}
