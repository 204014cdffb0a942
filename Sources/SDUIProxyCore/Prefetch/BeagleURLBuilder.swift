/// Builds URLs from a base URL and a path the way every Beagle client's `UrlBuilder` does (the seed's `URLBuilder`).
///
/// The rules, as Beagle's shared URL-building test data states them (restated in `BeagleURLBuilderTests`):
/// - an empty path builds nothing (`nil`);
/// - a path that contains no `%` is percent-encoded first: every character except ASCII letters and digits and
///   `-._~:/?#[]@!$&'()*+,;=` is written as `%XX` of its UTF-8 bytes (`/user/Name Of User` becomes
///   `/user/Name%20Of%20User`, `é` becomes `%C3%A9`); a path that already contains a `%` is taken as encoded
///   and left alone (`/myService%2520` stays as it is);
/// - a path that starts with `/` (including `//`) is relative: it is appended to the base, whose own path is
///   kept and whose one trailing `/` is dropped (`http://base.url/withPath` + `/a` is
///   `http://base.url/withPath/a`); without a base it is returned as it is;
/// - any other path is absolute and the base is not used (`absolutePath` stays `absolutePath`, which is not a
///   URL the proxy can fetch; callers decide what to do with it).
///
/// Where the clients hand the result to `URL(string:)`, this builder checks the same thing: a result with a
/// character a URI cannot hold (a space or non-ASCII byte left in an already-encoded path, a `%` that does not
/// start a `%XX` escape) builds nothing. A base that is not a valid URI reference builds nothing either.
public enum BeagleURLBuilder {
    /// The URL for `path` relative to `base`, or nil when none can be built.
    ///
    /// - Parameters:
    ///   - base: the base URL, like `http://backend:8081/bff`; nil or empty when there is none.
    ///   - path: the path or URL from a component, like `/screens/home` or `https://host/screen`.
    public static func build(base: String?, path: String) -> String? {
        guard !path.isEmpty else { return nil }
        // One walk settles the usual path, all allowed characters and no `%`: it is its own encoding, valid as it
        // is. Otherwise a path with a `%` must be valid as it stands, and one without is encoded, which makes it
        // valid. (This runs for every URL a stored component declares for prefetching.)
        let encoded: String
        switch classify(path) {
        case .allowed: encoded = path
        case .escaped:
            guard isValidURIReference(path) else { return nil }
            encoded = path
        case .unencoded: encoded = percentEncode(path)
        }
        guard path.utf8.first == UInt8(ascii: "/"), var base, !base.isEmpty else { return encoded }
        guard isValidURIReference(base) else { return nil }
        if base.utf8.last == UInt8(ascii: "/") { base.removeLast() }
        return base + encoded
    }

    /// Percent-encodes every UTF-8 byte outside the characters Beagle leaves as they are (``build(base:path:)``
    /// calls it only for a path ``classify(_:)`` found such a byte in).
    static func percentEncode(_ text: String) -> String {
        var result: [UInt8] = []
        result.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if isAllowed(byte) {
                result.append(byte)
            } else {
                result.append(UInt8(ascii: "%"))
                result.append(upperHex(byte >> 4))
                result.append(upperHex(byte & 0x0F))
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// What one walk over a path finds: every byte allowed and no `%`; a `%` (taken as encoded already); or,
    /// without a `%`, a byte that is not allowed.
    enum PathKind: Equatable {
        case allowed, escaped, unencoded
    }

    static func classify(_ path: String) -> PathKind {
        path.withContiguousUTF8 { bytes in
            var allAllowed = true
            for byte in bytes {
                if byte == UInt8(ascii: "%") { return .escaped }
                if !isAllowed(byte) { allAllowed = false }
            }
            return allAllowed ? .allowed : .unencoded
        }
    }

    /// Whether every character of `text` is one Beagle allows, or part of a well-formed `%XX` escape.
    static func isValidURIReference(_ text: String) -> Bool {
        text.withContiguousUTF8 { bytes in
            var hexDigitsOwed = 0
            for byte in bytes {
                if hexDigitsOwed > 0 {
                    guard isHexDigit(byte) else { return false }
                    hexDigitsOwed -= 1
                } else if byte == UInt8(ascii: "%") {
                    hexDigitsOwed = 2
                } else if !isAllowed(byte) {
                    return false
                }
            }
            return hexDigitsOwed == 0
        }
    }

    /// ASCII letters and digits plus RFC 3986's unreserved and reserved punctuation: `-._~:/?#[]@!$&'()*+,;=`.
    @inline(__always)
    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: ":"),
            UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "["), UInt8(ascii: "]"),
            UInt8(ascii: "@"), UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","),
            UInt8(ascii: ";"), UInt8(ascii: "="):
            true
        default:
            false
        }
    }

    @inline(__always)
    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default:
            false
        }
    }

    private static func upperHex(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
    }
}
