/// An HTTP content coding (RFC 9110 section 8.4.1): how a representation's bytes are compressed.
///
/// The proxy stores `br` and `gzip` forms of a response beside the identity one; `deflate` it only decodes, when
/// a backend sends it anyway. HTTP's `deflate` is the zlib format (RFC 1950), not raw deflate.
public enum ContentCoding: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case br
    case gzip
    case deflate

    /// The codings the proxy stores, in the order it prefers them at equal weight: brotli compresses
    /// server-driven JSON better than gzip at the levels a store-time compressor can afford.
    public static let stored: [ContentCoding] = [.br, .gzip]

    /// The coding a `Content-Encoding` token names (case-insensitive; `x-gzip` is gzip, RFC 9110 section 8.4.1.3);
    /// nil for `identity` and for codings the proxy cannot decode.
    public init?(token: some StringProtocol) {
        switch token.lowercased() {
        case "br": self = .br
        case "gzip", "x-gzip": self = .gzip
        case "deflate": self = .deflate
        default: return nil
        }
    }

    public var description: String { rawValue }
}
