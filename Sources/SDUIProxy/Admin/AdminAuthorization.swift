import Foundation
import NIOHTTP1
import SDUIProxyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Who may call the admin endpoints.
///
/// With a token (from `SDUI_PROXY_ADMIN_TOKEN`, never from the config file), every admin path but the probes
/// (`/health` and `/ready`, unless `admin.probesOpen` is false) needs `Authorization: Bearer <token>`, or (as a
/// browser sends it for the status page) `Authorization: Basic` with the token as the password. Without one, the admin listener must be bound to a loopback
/// address (``checkBinding(host:token:)`` enforces that at start-up) and every request is allowed. A token that
/// is set but holds nothing is refused at start-up (``checkBinding(host:)``): a variable emptied by mistake must
/// not turn authentication off.
///
/// Its descriptions and mirror never show the token: it may be printed, dumped or logged.
public struct AdminAuthorization: Sendable {
    /// The environment variable that holds the token.
    public static let tokenVariable = "SDUI_PROXY_ADMIN_TOKEN"
    /// The probes: liveness and readiness checks carry no credentials, and their answers reveal nothing.
    public static let probePaths: Set<String> = ["/health", "/ready"]

    /// The paths anyone may call: ``probePaths`` unless ``openingProbes(_:)`` closed them.
    public private(set) var publicPaths = AdminAuthorization.probePaths

    /// The token's bytes; nil without one, empty when one was given that held only whitespace (no request
    /// matches it, and ``checkBinding(host:)`` refuses it).
    private let token: [UInt8]?

    /// - Parameter token: the bearer token; nil means no token is required. Whitespace around it (the newline of a
    ///   token read from a file) is not part of it. An empty or whitespace-only token is kept as such: every
    ///   request but `/health` is refused, and ``checkBinding(host:)`` refuses to start.
    public init(token: String?) {
        self.token = token.map(Self.trimmed)
    }

    /// `text` without the spaces, tabs and line breaks around it.
    private static func trimmed(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) })
        else { return [] }
        return Array(bytes[first...last])
    }

    /// Reads the token from ``tokenVariable`` in `environment`.
    public init(environment: [String: String]) {
        self.init(token: environment[Self.tokenVariable])
    }

    /// This authorization with the probes open to anyone (`admin.probesOpen`), or needing the token like every other
    /// path when `open` is false.
    public func openingProbes(_ open: Bool) -> AdminAuthorization {
        var authorization = self
        authorization.publicPaths = open ? Self.probePaths : []
        return authorization
    }

    /// Whether a token is required for paths other than the public ones.
    public var requiresToken: Bool { token != nil }

    /// Whether a request for `path` (without its query) carrying `headers` may be answered.
    ///
    /// The token is compared in constant time: the comparison reads every byte of the expected token whatever
    /// the presented one holds, and a presented token of another length costs the same.
    public func isAuthorized(_ headers: HTTPHeaders, path: String) -> Bool {
        let pathOnly = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if publicPaths.contains(String(pathOnly)) { return true }
        guard let token else { return true }
        let values = headers[canonicalForm: "authorization"]
        guard values.count == 1,
            let presented = Self.bearerCredentials(values[0]) ?? Self.basicPassword(values[0])
        else { return false }
        return Self.constantTimeEquals(token, presented)
    }

    /// The realm of the `WWW-Authenticate` challenge.
    public static let realm = "sdui-proxy"

    /// The answer to a refused request for `path`: ``unauthorizedResponse``, but for the status page, whose
    /// challenge is `Basic` (RFC 7617), so that a browser asks for the token (as the password, any user name) and
    /// sends it with the page's own requests.
    public static func unauthorizedResponse(for path: String) -> AdminResponse {
        guard path == StatusPage.path || path.hasPrefix(StatusPage.path + "?") else { return unauthorizedResponse }
        var response = AdminResponse(
            ProxyError(.unauthorized, "the status page needs the admin token as the password (any user name)")
        )
        response.headers = [("WWW-Authenticate", #"Basic realm="\#(realm)", charset="UTF-8""#)]
        return response
    }

    /// The answer to a request that ``isAuthorized(_:path:)`` refused: 401 with the error model's body, and the
    /// challenge RFC 9110 section 11.6.1 requires of a 401 (RFC 6750's `Bearer` scheme).
    public static let unauthorizedResponse: AdminResponse = {
        var response = AdminResponse(
            ProxyError(.unauthorized, "this admin endpoint needs the header Authorization: Bearer <token>")
        )
        response.headers = [("WWW-Authenticate", #"Bearer realm="\#(realm)""#)]
        return response
    }()

    /// The credentials of an `Authorization: Bearer <credentials>` value (scheme case-insensitive), or nil.
    static func bearerCredentials(_ value: Substring) -> ArraySlice<UInt8>? {
        let bytes = Array(value.utf8)
        let scheme = Array("bearer".utf8)
        guard bytes.count > scheme.count, bytes[scheme.count] == UInt8(ascii: " ") else { return nil }
        for index in scheme.indices where bytes[index] | 0x20 != scheme[index] { return nil }
        var start = scheme.count
        while start < bytes.count, bytes[start] == UInt8(ascii: " ") { start += 1 }
        var end = bytes.count
        while end > start, bytes[end - 1] == UInt8(ascii: " ") || bytes[end - 1] == UInt8(ascii: "\t") { end -= 1 }
        guard start < end else { return nil }
        return bytes[start..<end]
    }

    /// The password of an `Authorization: Basic <base64 of user:password>` value (scheme case-insensitive), or nil:
    /// a browser's form of the token, which it sends as the password.
    static func basicPassword(_ value: Substring) -> ArraySlice<UInt8>? {
        let scheme = "basic "
        guard value.utf8.count > scheme.utf8.count, value.prefix(scheme.count).lowercased() == scheme else {
            return nil
        }
        let encoded = value.dropFirst(scheme.count).trimmingCharacters(in: .whitespaces)
        guard let decoded = Data(base64Encoded: encoded), let colon = decoded.firstIndex(of: UInt8(ascii: ":")) else {
            return nil
        }
        let password = Array(decoded[decoded.index(after: colon)...])
        return password.isEmpty ? nil : password[...]
    }

    /// Compares without an early exit: the loop always runs over all of `expected`, and a length difference is
    /// folded into the result rather than returned early.
    @inline(never)
    static func constantTimeEquals(_ expected: [UInt8], _ presented: ArraySlice<UInt8>) -> Bool {
        var difference = UInt(bitPattern: expected.count ^ presented.count)
        let presentedStart = presented.startIndex
        let presentedCount = presented.count
        for index in 0..<expected.count {
            // Past the end of a shorter presented token, compare with a byte that differs from the expected one,
            // so the work per byte stays the same.
            let other = index < presentedCount ? presented[presentedStart + index] : ~expected[index]
            difference |= UInt(expected[index] ^ other)
        }
        return difference == 0
    }

    // MARK: Binding

    /// Refuses to bind the admin listener to `host` when that would expose it without this token, and refuses a
    /// token that is set but empty.
    public func checkBinding(host: String) throws(ConfigurationError) {
        guard let token else { return try Self.checkBinding(host: host, token: nil) }
        guard !token.isEmpty else {
            throw ConfigurationError(
                key: Self.tokenVariable,
                problem: """
                    is set but empty: set it to the bearer token admin clients send, or unset it to run the admin \
                    listener without a token (on a loopback address only)
                    """
            )
        }
        // A token no client could present would lock every admin endpoint but /health.
        guard Self.isBearerToken(token[...]) else {
            throw ConfigurationError(
                key: Self.tokenVariable,
                problem: "must be a bearer token: letters, digits and - . _ ~ + / only, then = padding (RFC 6750)"
            )
        }
    }

    /// Whether `bytes` is a `b64token` (RFC 6750 section 2.1): what `Authorization: Bearer` may carry.
    static func isBearerToken(_ bytes: ArraySlice<UInt8>) -> Bool {
        let body = bytes.reversed().drop { $0 == UInt8(ascii: "=") }
        return !body.isEmpty
            && body.allSatisfy { byte in
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                    || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                    || "-._~+/".utf8.contains(byte)
            }
    }

    /// Refuses to expose the admin listener beyond this host without a token.
    ///
    /// - Throws: ``ConfigurationError`` for `admin.host` when `host` is not a loopback address (127.0.0.0/8,
    ///   ::1, localhost) and `token` is nil or empty.
    public static func checkBinding(host: String, token: String?) throws(ConfigurationError) {
        if let token, !token.isEmpty { return }
        guard isLoopback(host) else {
            throw ConfigurationError(
                key: "admin.host",
                problem: """
                    \(host) is not a loopback address, and the admin endpoints would be open to the network \
                    without a token: set \(tokenVariable) (clients then send "Authorization: Bearer <token>"), \
                    or bind admin.host to 127.0.0.1
                    """
            )
        }
    }

    /// Whether `host` names this machine only: `localhost`, 127.0.0.0/8, `::1`, or an IPv4-mapped loopback.
    public static func isLoopback(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if name.hasPrefix("[") && name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }

        var ipv4 = in_addr()
        if inet_pton(AF_INET, name, &ipv4) == 1 {
            // A dotted quad: inet_pton accepts exactly four decimal parts, so the first byte is the first part.
            return withUnsafeBytes(of: &ipv4) { $0[0] } == 127
        }
        var ipv6 = in6_addr()
        guard inet_pton(AF_INET6, name, &ipv6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: &ipv6) { Array($0) }
        let loopback: [UInt8] = Array(repeating: 0, count: 15) + [1]
        if bytes == loopback { return true }
        let mappedPrefix: [UInt8] = Array(repeating: 0, count: 10) + [0xFF, 0xFF]
        return Array(bytes[0..<12]) == mappedPrefix && bytes[12] == 127
    }
}

extension AdminAuthorization: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Whether a token is set, never the token.
    public var description: String {
        switch token {
        case nil: "AdminAuthorization(token: none)"
        case .some(let bytes) where bytes.isEmpty: "AdminAuthorization(token: empty)"
        case .some: "AdminAuthorization(token: <redacted>)"
        }
    }

    public var debugDescription: String { description }

    /// A mirror without the token's bytes, for `dump` and `String(reflecting:)` of anything that holds this.
    public var customMirror: Mirror {
        let token: String =
            switch self.token {
            case nil: "none"
            case .some(let bytes) where bytes.isEmpty: "empty"
            case .some: "<redacted>"
            }
        return Mirror(self, children: ["token": token], displayStyle: .struct)
    }
}
