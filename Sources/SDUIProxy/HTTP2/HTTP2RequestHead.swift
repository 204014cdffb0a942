import NIOHPACK
import NIOHTTP1
import SDUIProxyCore

/// The request head an HTTP/2 stream's HEADERS frame stands for, as ``RequestRouter`` and ``RequestAdmission`` see
/// an HTTP/1.1 one (RFC 9113 section 8.3):
///
/// - version 2.0, the method and target from `:method` and `:path`;
/// - `Host` from `:authority` when the block has none; both, naming different hosts, are a malformed request;
/// - the `cookie` fields joined into one with `"; "`, as HTTP/1.1 carries them (section 8.2.3);
/// - the framing an HTTP/1.1 request would declare: a body that follows without `content-length` is `chunked`
///   (its length known at its end), whatever the method; none at all is `content-length: 0` for a method that
///   expects one.
///
/// The block is checked on the same walk (``HTTP2RequestFieldRules``: pseudo-headers first, each once, the ones a
/// request needs, lower-case names, clean values, no connection-specific fields): `NIOHTTP2Handler` checks none.
enum HTTP2RequestHead {
    /// Why a block gives no head.
    enum Failure: Error, Equatable {
        /// It breaks HTTP/2's rules: the stream is reset (RFC 9113 section 8.1.1).
        case malformed(HTTP2RequestFieldRules.Violation)
        /// It is well-formed, but no request the proxy answers: the stream is answered with the error.
        case refused(ProxyError)
    }

    /// The head of `block`; `endStream` when no body follows it.
    static func make(_ block: HPACKHeaders, endStream: Bool) -> Result<HTTPRequestHead, Failure> {
        var rules = HTTP2RequestFieldRules()
        var method: HTTPMethod?
        var path: String?
        var authority: String?
        var host: String?
        var hasContentLength = false
        var cookie: String?
        var fields: [(String, String)] = []
        fields.reserveCapacity(block.count + 1)
        for (name, value, _) in block {
            if let violation = rules.check(name: name, value: value) { return .failure(.malformed(violation)) }
            guard name.utf8.first == UInt8(ascii: ":") else {
                switch name {
                case "host": host = value
                case "content-length": hasContentLength = true
                case "cookie":
                    cookie = cookie.map { $0 + "; " + value } ?? value
                    continue
                default: break
                }
                fields.append((name, value))
                continue
            }
            switch name {
            case ":method": method = HTTPMethod(rawValue: value)
            case ":path": path = value
            case ":authority": authority = value
            default: break  // :scheme, checked present by the rules
            }
        }
        if let violation = rules.finish() { return .failure(.malformed(violation)) }
        // A CONNECT request (no :path) is well-formed, but the proxy opens no tunnels.
        guard let method, let path else {
            return .failure(.refused(ProxyError(.badRequest, "the request has no :path: the proxy opens no tunnels")))
        }
        if let host, let authority, !HTTPSyntax.sameIgnoringCase(host, authority) {
            return .failure(.refused(ProxyError(.badRequest, "the Host field and :authority name different hosts")))
        }
        if host == nil, let authority { fields.insert(("host", authority), at: 0) }
        if let cookie { fields.append(("cookie", cookie)) }
        if !hasContentLength {
            if !endStream {
                fields.append(("transfer-encoding", "chunked"))
            } else if !Self.expectsNoBody(method) {
                fields.append(("content-length", "0"))
            }
        }
        return .success(
            HTTPRequestHead(
                version: HTTPVersion(major: 2, minor: 0),
                method: method,
                uri: path,
                headers: HTTPHeaders(fields)
            )
        )
    }

    /// Why the trailer block after a request's body is malformed, or nil: it carries no pseudo-header field and
    /// follows the rules regular fields follow in a head.
    static func violation(inTrailers block: HPACKHeaders) -> HTTP2RequestFieldRules.Violation? {
        var rules = HTTP2RequestFieldRules(trailers: true)
        for (name, value, _) in block {
            if let violation = rules.check(name: name, value: value) { return violation }
        }
        return rules.finish()
    }

    /// Methods whose requests a user agent sends without `content-length` when they have no body (RFC 9110
    /// section 8.6).
    private static func expectsNoBody(_ method: HTTPMethod) -> Bool {
        switch method {
        case .GET, .HEAD, .DELETE, .CONNECT, .TRACE, .OPTIONS: true
        default: false
        }
    }
}
