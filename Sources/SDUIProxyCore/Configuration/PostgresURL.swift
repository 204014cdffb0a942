/// Where a PostgreSQL server is and how to log in to it, read from a `postgres://` or `postgresql://` URL:
/// `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=MODE`.
///
/// The password is percent-decoded and kept only here: ``description``, `debugDescription` and the value's
/// mirror show ``ConfigurationPrinter/redacted`` in its place, and a URL that cannot be read is reported without
/// any part of its user information or host.
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// How the connection is encrypted (the query parameter `sslmode`, as libpq reads it).
    public enum SSLMode: String, Sendable, Equatable, CaseIterable {
        /// Plain TCP.
        case disable
        /// Encrypted, without checking the server's certificate.
        case require
        /// Encrypted, with the server's certificate checked against the system's trust roots and the host name.
        case verifyFull = "verify-full"
    }

    /// A URL that cannot be read: what is wrong, without the password.
    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public var message: String

        public init(_ message: String) {
            self.message = message
        }

        public var description: String { message }
    }

    /// The PostgreSQL port used when the URL names none.
    public static let defaultPort = 5432

    /// The role to log in as (percent-decoded).
    public var user: String
    /// The password (percent-decoded), or nil for none.
    public var password: String?
    /// A host name, an IPv4 address, or an IPv6 address without its brackets.
    public var host: String
    public var port: Int
    /// The database; the URL's path, or the user name when it has none.
    public var database: String
    public var sslMode: SSLMode

    /// A URL with these parts; `database` defaults to `user`.
    public init(
        user: String,
        password: String? = nil,
        host: String,
        port: Int = PostgresURL.defaultPort,
        database: String? = nil,
        sslMode: SSLMode = .disable
    ) {
        self.user = user
        self.password = password
        self.host = host
        self.port = port
        self.database = database ?? user
        self.sslMode = sslMode
    }

    /// Whether `text` starts with a PostgreSQL URL scheme (`postgres://` or `postgresql://`, any case): such a
    /// value names a server rather than a path.
    public static func hasPostgresScheme(_ text: String) -> Bool {
        schemeLength(text) != nil
    }

    /// Reads `text`.
    ///
    /// - Throws: ``ParseError`` saying what is wrong; it never repeats the user information or the host.
    public init(parsing text: String) throws(ParseError) {
        guard let schemeLength = Self.schemeLength(text) else {
            throw ParseError("must start with postgres:// or postgresql://")
        }
        guard text.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
            throw ParseError("must not contain spaces or control characters")
        }
        let rest = Substring(text).dropFirst(schemeLength)
        if rest.contains("#") { throw ParseError("must not have a fragment (#...)") }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var pathAndQuery = rest[authorityEnd...]

        // The last @ ends the user information: a password may hold an unencoded @.
        guard let at = authority.lastIndex(of: "@") else {
            throw ParseError("has no user name (postgres://USER:PASSWORD@HOST:PORT/DATABASE)")
        }
        let userInfo = authority[..<at]
        let hostAndPort = authority[authority.index(after: at)...]
        let userText: Substring
        var password: String?
        if let colon = userInfo.firstIndex(of: ":") {
            userText = userInfo[..<colon]
            guard let decoded = Self.percentDecoded(userInfo[userInfo.index(after: colon)...]) else {
                throw ParseError("the password has a bad percent escape (a % must start %XX)")
            }
            password = decoded
        } else {
            userText = userInfo
        }
        guard let user = Self.percentDecoded(userText), !user.isEmpty else {
            throw ParseError(
                userText.isEmpty
                    ? "has no user name (postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
                    : "the user name has a bad percent escape (a % must start %XX)"
            )
        }

        let (host, port) = try Self.hostAndPort(hostAndPort)

        var query = Substring("")
        if let questionMark = pathAndQuery.firstIndex(of: "?") {
            query = pathAndQuery[pathAndQuery.index(after: questionMark)...]
            pathAndQuery = pathAndQuery[..<questionMark]
        }
        var database = user
        if !pathAndQuery.isEmpty {
            let path = pathAndQuery.dropFirst()
            guard !path.contains("/") else { throw ParseError("the database name must not contain /") }
            guard let decoded = Self.percentDecoded(path) else {
                throw ParseError("the database name has a bad percent escape (a % must start %XX)")
            }
            if !decoded.isEmpty { database = decoded }
        }

        var sslMode = SSLMode.disable
        for parameter in query.split(separator: "&") {
            let parts = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            let value = parts.count > 1 ? Self.percentDecoded(parts[1]) : ""
            switch name {
            case "sslmode":
                guard let value, let mode = SSLMode(rawValue: value) else {
                    let shown = value.map { "\"\($0)\"" } ?? "the value"
                    throw ParseError(
                        "sslmode \(shown) is not one of \(SSLMode.allCases.map(\.rawValue).joined(separator: ", "))"
                    )
                }
                sslMode = mode
            case "application_name":
                break
            default:
                throw ParseError(
                    "the parameter \"\(name)\" is not supported (supported: sslmode, application_name)"
                )
            }
        }
        self.init(user: user, password: password, host: host, port: port, database: database, sslMode: sslMode)
    }

    /// The URL with ``ConfigurationPrinter/redacted`` for the password; ``init(parsing:)`` reads it back to the
    /// same value but for the password.
    public var description: String {
        var text = "postgres://" + Self.percentEncoded(user)
        if password != nil { text += ":" + ConfigurationPrinter.redacted }
        text += "@" + (host.contains(":") ? "[\(host)]" : host)
        if port != Self.defaultPort { text += ":\(port)" }
        if database != user { text += "/" + Self.percentEncoded(database) }
        if sslMode != .disable { text += "?sslmode=" + sslMode.rawValue }
        return text
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "user": user, "password": password == nil ? "nil" : ConfigurationPrinter.redacted, "host": host,
                "port": port, "database": database, "sslMode": sslMode,
            ]
        )
    }

    // MARK: Parsing

    private static func schemeLength(_ text: String) -> Int? {
        for scheme in ["postgres://", "postgresql://"] {
            let head = text.utf8.prefix(scheme.utf8.count)
            if head.count == scheme.utf8.count, zip(head, scheme.utf8).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) {
                return scheme.count
            }
        }
        return nil
    }

    private static func hostAndPort(_ text: Substring) throws(ParseError) -> (String, Int) {
        var host: Substring
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else {
                throw ParseError("the IPv6 address has no closing ]")
            }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw ParseError("expected :PORT after the IPv6 address") }
                portText = after.dropFirst()
            }
            guard IPAddressRange.parseAddress(String(host))?.count == 16 else {
                throw ParseError("the host in [...] is not an IPv6 address")
            }
        } else {
            host = text
            if let colon = text.firstIndex(of: ":") {
                host = text[..<colon]
                portText = text[text.index(after: colon)...]
            }
            guard !host.isEmpty else { throw ParseError("has no host (postgres://USER:PASSWORD@HOST:PORT/DATABASE)") }
            let allowed = host.utf8.allSatisfy { byte in
                (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                    || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
            }
            guard allowed else {
                throw ParseError("the host is not a host name or an IP address (write an IPv6 address in [...])")
            }
        }
        var port = defaultPort
        if let portText {
            guard !portText.isEmpty, portText.utf8.count <= 5, portText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
                let number = Int(portText), (1...65535).contains(number)
            else { throw ParseError("the port is not a number from 1 to 65535") }
            port = number
        }
        return (String(host), port)
    }

    /// `text` with `%XX` escapes decoded, or nil when an escape is malformed or the bytes are not UTF-8.
    private static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// `text` with everything but unreserved characters percent-encoded.
    private static func percentEncoded(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            let unreserved =
                (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || "-._~".utf8.contains(byte)
            if unreserved {
                result.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                result += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return result
    }
}
