/// Where the component backend lives, parsed from `upstream.url`.
///
/// `http://backend:8081/bff` is a network backend with base path `/bff`; `file:config/samples` is a directory
/// served by the file-backed client.
public enum UpstreamOrigin: Sendable, Equatable {
    case http(HTTPOrigin)
    case directory(path: String)

    /// A backend reached over HTTP.
    public struct HTTPOrigin: Sendable, Equatable {
        /// `http` or `https`.
        public var scheme: String
        public var host: String
        public var port: Int
        /// The base path without a trailing `/` (empty for the root).
        public var basePath: String

        /// `scheme://host[:port]`, with the port only when it is not the scheme's default.
        public var origin: String { "\(scheme)://\(hostHeader)" }

        /// The `Host` header value for this origin: the host (bracketed when IPv6), and the port unless it is the
        /// scheme's default.
        public var hostHeader: String {
            let defaultPort = scheme == "https" ? 443 : 80
            let hostPart = host.contains(":" as Character) ? "[\(host)]" : host
            return port == defaultPort ? hostPart : "\(hostPart):\(port)"
        }
    }

    public struct ParseError: Error, Equatable, Sendable {
        public var message: String
    }

    public init(parsing text: String) throws(ParseError) {
        if text.hasPrefix("file:") {
            var path = String(text.dropFirst("file:".count))
            if path.hasPrefix("//") { path.removeFirst(2) }
            guard !path.isEmpty else {
                throw ParseError(message: "a file: URL needs a directory, like file:config/samples")
            }
            self = .directory(path: path)
            return
        }
        guard let parsed = AbsoluteURL(parsing: text) else {
            let shown = ConfigurationPrinter.redactingURLCredentials(text)
            let credentials = shown == text ? "" : " (credentials in the URL are not supported)"
            throw ParseError(message: "\"\(shown)\" is not an http://, https:// or file: URL\(credentials)")
        }
        guard parsed.query == nil else { throw ParseError(message: "the upstream URL cannot have a query") }
        var base = parsed.path
        while base.hasSuffix("/") { base.removeLast() }
        self = .http(HTTPOrigin(scheme: parsed.scheme, host: parsed.host, port: parsed.port, basePath: base))
    }
}

/// A minimal parser for absolute `http` and `https` URLs: the parts the proxy needs, strictly checked.
public struct AbsoluteURL: Sendable, Equatable {
    public var scheme: String
    public var host: String
    public var port: Int
    /// The path, `/` at least.
    public var path: String
    public var query: String?

    public init?(parsing text: String) {
        let lower = text.lowercased()
        let scheme: String
        if lower.hasPrefix("http://") {
            scheme = "http"
        } else if lower.hasPrefix("https://") {
            scheme = "https"
        } else {
            return nil
        }
        let rest = text.dropFirst(scheme.count + 3)
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        guard !authority.isEmpty, !authority.contains("@" as Character),
            authority.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else { return nil }

        var host = Substring(authority)
        var port = scheme == "https" ? 443 : 80
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            if after.hasPrefix(":") {
                guard let parsedPort = Int(after.dropFirst()), (1...65535).contains(parsedPort) else { return nil }
                port = parsedPort
            } else if !after.isEmpty {
                return nil
            }
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: ":") {
            guard let parsedPort = Int(host[host.index(after: colon)...]), (1...65535).contains(parsedPort) else {
                return nil
            }
            port = parsedPort
            host = host[..<colon]
        }
        guard !host.isEmpty else { return nil }

        var remainder = rest[authorityEnd...]
        if let hash = remainder.firstIndex(of: "#") { remainder = remainder[..<hash] }
        var path = remainder
        var query: String?
        if let mark = remainder.firstIndex(of: "?") {
            path = remainder[..<mark]
            query = String(remainder[remainder.index(after: mark)...])
        }
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        self.path = path.isEmpty ? "/" : String(path)
        self.query = query
    }
}
