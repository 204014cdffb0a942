/// What makes an HTTP/2 request's header block well-formed (RFC 9113 sections 8.2 and 8.3), checked field by field
/// as the block is read: a block that breaks a rule is malformed, and its stream is reset.
///
/// swift-nio-http2 can check blocks itself, but only both ways at once: the responses' blocks, which the proxy builds
/// from names and values its HTTP/1.1 parser validated already, cost more to check than the rest of an HTTP/2 hit.
/// The proxy checks what it receives here instead, on the walk that reads the block anyway, and at least as strictly:
/// a value may hold no control character but the tab (as over HTTP/1.1), not only no CR, LF or NUL.
///
/// Feed every field in order to ``check(name:value:)``, then ask ``finish()``.
public struct HTTP2RequestFieldRules: Sendable {
    /// Why a block is malformed; the text is for the log.
    public struct Violation: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// The pseudo-header fields seen so far, a bit each.
    private var seen: UInt8 = 0
    /// A regular field has been seen: no pseudo-header may follow (section 8.3).
    private var regularFieldsBegan = false
    private var isCONNECT = false

    private static let method: UInt8 = 1
    private static let scheme: UInt8 = 2
    private static let path: UInt8 = 4
    private static let authority: UInt8 = 8

    /// Whether trailers are checked: they carry no pseudo-header field at all (section 8.1).
    private let isTrailers: Bool

    /// Rules for a request's header block, or with `trailers` for the trailer block after its body.
    public init(trailers: Bool = false) {
        self.isTrailers = trailers
    }

    /// The next field of the block, in the order received; a violation ends the check.
    public mutating func check(name: String, value: String) -> Violation? {
        name.withContiguousUTF8 { name in
            value.withContiguousUTF8 { value in
                check(name: UnsafeRawBufferPointer(name), value: UnsafeRawBufferPointer(value))
            }
        }
    }

    /// ``check(name:value:)`` for bytes read in place.
    public mutating func check(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Violation? {
        guard let first = name.first else { return Violation("a field has an empty name") }
        if first == UInt8(ascii: ":") { return checkPseudoHeader(name: name, value: value) }
        regularFieldsBegan = true
        // Lower-case tokens only (section 8.2.1): a capital letter is malformed, not folded.
        for byte in name where !HTTPSyntax.isTokenByte(byte) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
        {
            return Violation("a field name is not a lower-case token")
        }
        if let violation = Self.checkValue(value) { return violation }
        // Connection-specific fields have no meaning in HTTP/2 (section 8.2.2); `te` may only say `trailers`.
        switch name.count {
        case 2 where HTTPSyntax.equalsIgnoringCase(bytes: name, "te"):
            guard HTTPSyntax.equalsIgnoringCase(bytes: value, "trailers") else {
                return Violation("te names something other than trailers")
            }
        case 7 where HTTPSyntax.equalsIgnoringCase(bytes: name, "upgrade"),
            10
        where HTTPSyntax.equalsIgnoringCase(bytes: name, "connection")
            || HTTPSyntax.equalsIgnoringCase(bytes: name, "keep-alive"),
            16 where HTTPSyntax.equalsIgnoringCase(bytes: name, "proxy-connection"),
            17 where HTTPSyntax.equalsIgnoringCase(bytes: name, "transfer-encoding"):
            return Violation("a connection-specific field")
        default:
            break
        }
        return nil
    }

    /// Once every field was checked: the pseudo-header fields a request must have (section 8.3.1; a CONNECT
    /// request's of section 8.5).
    public func finish() -> Violation? {
        guard !isTrailers else { return nil }
        if isCONNECT {
            // A tunnel names only where it goes.
            guard seen & Self.authority != 0, seen & (Self.scheme | Self.path) == 0 else {
                return Violation("a CONNECT request without :authority, or with :scheme or :path")
            }
            return nil
        }
        guard seen & (Self.method | Self.scheme | Self.path) == Self.method | Self.scheme | Self.path else {
            return Violation("the request lacks :method, :scheme or :path")
        }
        return nil
    }

    private mutating func checkPseudoHeader(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Violation? {
        guard !isTrailers else { return Violation("a pseudo-header field in trailers") }
        guard !regularFieldsBegan else { return Violation("a pseudo-header field after a regular one") }
        let bit: UInt8
        switch name.count {
        case 5 where HTTPSyntax.equalsIgnoringCase(bytes: name, ":path"): bit = Self.path
        case 7 where HTTPSyntax.equalsIgnoringCase(bytes: name, ":method"): bit = Self.method
        case 7 where HTTPSyntax.equalsIgnoringCase(bytes: name, ":scheme"): bit = Self.scheme
        case 10 where HTTPSyntax.equalsIgnoringCase(bytes: name, ":authority"): bit = Self.authority
        // `:protocol` (RFC 8441) too: the proxy does not offer extended CONNECT.
        default: return Violation("an unknown pseudo-header field")
        }
        // Pseudo-header names are lower case like the rest; the comparisons above ignore case.
        for byte in name where byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") {
            return Violation("a pseudo-header name is not lower case")
        }
        guard seen & bit == 0 else { return Violation("a pseudo-header field appears twice") }
        seen |= bit
        // A method, scheme, target or authority holds no white space at all (RFC 9113 section 8.3.1, RFC 3986).
        for byte in value where byte <= 0x20 || byte == 0x7F {
            return Violation("a pseudo-header value holds white space or a control byte")
        }
        switch bit {
        case Self.method:
            guard !value.isEmpty, value.allSatisfy(HTTPSyntax.isTokenByte) else {
                return Violation(":method is not a token")
            }
            // Methods are case-sensitive (RFC 9110 section 9.1).
            isCONNECT = value.elementsEqual(("CONNECT" as StaticString).rawBytes)
        case Self.path:
            guard !value.isEmpty else { return Violation(":path is empty") }
        default:
            break
        }
        return Self.checkValue(value)
    }

    /// A value holds visible characters, spaces and tabs, neither first nor last a space or tab (section 8.2.1).
    private static func checkValue(_ value: UnsafeRawBufferPointer) -> Violation? {
        guard HTTPSyntax.isFieldValue(bytes: value) else { return Violation("a field value holds a control character") }
        if let first = value.first, let last = value.last,
            first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") || last == UInt8(ascii: " ")
                || last == UInt8(ascii: "\t")
        {
            return Violation("a field value starts or ends with white space")
        }
        return nil
    }
}
