import NIOCore
import NIOHTTP1

/// What a GET that found no whole response stored does with the parts of it the cache holds (RFC 9111 sections
/// 3.3 and 3.4; RFC 9110 section 14), decided without I/O.
///
/// A range the held parts cover is answered from them. A range they do not cover goes to the backend as that
/// range, with `If-Range` on the parts' tag so that the answer can be joined to them. A request for the whole,
/// when the parts hold its first bytes, asks only for the rest (`Range: bytes=N-`, `If-Range`). With no parts, a
/// range is asked for as such when `fetchesParts` (`cache.rangeMiss: part`, or a representation too large to
/// hold whole); otherwise the whole representation is fetched and stored, and the range cut from it.
public enum PartialContentPlan {
    public enum Step: Equatable, Sendable {
        /// A 206 of these bytes from the held parts.
        case serve(ClosedRange<Int>)
        /// Ask the backend for `range`, with `ifRange` when parts are held; `whole` when the client asked for
        /// every byte (the answer completes the held prefix).
        case fetch(range: String, ifRange: String?, whole: Bool)
        /// As any miss: the whole representation.
        case usual
    }

    /// The step for a GET with `headers` that missed, given what is held for its key.
    public static func step(
        headers: HTTPHeaders,
        held: PartialContent?,
        now: NIODeadline,
        fetchesParts: Bool
    ) -> Step {
        let ranges = headers["range"]
        guard !ranges.isEmpty else {
            // A request for the whole: the held prefix is completed, as long as a condition does not stand in the way
            // (the backend judges those on the whole).
            guard let held, held.prefixLength > 0, !hasCondition(headers) else { return .usual }
            return .fetch(range: "bytes=\(held.prefixLength)-", ifRange: held.etag, whole: true)
        }
        // Several ranges or another unit: the whole, as a stored response answers them.
        guard ranges.count == 1, let spec = RangeRequest.byteRange(ranges[0]) else { return .usual }
        let ifRange = headers["if-range"]
        if !ifRange.isEmpty {
            // A client's own If-Range is judged against the parts' tag; one that does not hold gets the whole.
            guard let held, ifRange.count == 1,
                RangeRequest.matchesStrongly(ifRange[0], etag: held.etag, lastModified: nil, date: { nil })
            else { return .usual }
        }
        guard let held else { return fetchesParts ? .fetch(range: spec.value, ifRange: nil, whole: false) : .usual }
        if held.isFresh(at: now), case .part(let range) = RangeRequest.satisfy(spec, length: held.completeLength),
            held.covers(range), !hasCondition(headers)
        {
            return .serve(range)
        }
        return .fetch(range: spec.value, ifRange: held.etag, whole: false)
    }

    /// Whether the request carries a precondition or a validator of its own: answered by the backend, on the whole
    /// representation, not from parts.
    private static func hasCondition(_ headers: HTTPHeaders) -> Bool {
        headers.contains(name: "if-match") || headers.contains(name: "if-none-match")
            || headers.contains(name: "if-modified-since") || headers.contains(name: "if-unmodified-since")
    }
}
