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
///
/// A request with a condition of its own (`If-None-Match`, `If-Modified-Since`, `If-Match`,
/// `If-Unmodified-Since`) goes the usual way: the backend judges those on the whole representation, and a fill of
/// the whole answers them as any stored response does.
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
    ///
    /// - Parameters:
    ///   - fetchesParts: whether a range with nothing held is asked for as a range.
    ///   - mayServeHeld: whether held parts may answer without the backend (not when the client's `no-cache` is
    ///     honoured).
    ///   - maxFetchBytes: the most a fetch may bring (`upstream.maxResponseBytes`): a prefix whose rest is larger
    ///     is not completed, since the rest could not be held.
    public static func step(
        headers: HTTPHeaders,
        held: PartialContent?,
        now: NIODeadline,
        fetchesParts: Bool,
        mayServeHeld: Bool = true,
        maxFetchBytes: Int = .max
    ) -> Step {
        guard !hasCondition(headers) else { return .usual }
        let ranges = headers["range"]
        guard !ranges.isEmpty else {
            // A request for the whole: the held prefix is completed when the whole could be held.
            guard let held, held.prefixLength > 0, held.completeLength <= maxFetchBytes else { return .usual }
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
        if mayServeHeld, held.isFresh(at: now),
            case .part(let range) = RangeRequest.satisfy(spec, length: held.completeLength), held.covers(range)
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
