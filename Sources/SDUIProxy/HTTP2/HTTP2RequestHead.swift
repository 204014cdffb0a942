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
/// `NIOHTTP2Handler` has validated the block already (pseudo-headers first, each once, the ones a request needs,
/// lower-case names, no connection-specific fields).
enum HTTP2RequestHead {
    /// The head of `block`; `endStream` when no body follows it.
    static func make(_ block: HPACKHeaders, endStream: Bool) -> Result<HTTPRequestHead, ProxyError> {
        var method: HTTPMethod?
        var path: String?
        var authority: String?
        var host: String?
        var hasContentLength = false
        var cookie: String?
        var fields: [(String, String)] = []
        fields.reserveCapacity(block.count + 1)
        for (name, value, _) in block {
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
            default: break  // :scheme, checked present by the connection handler
            }
        }
        guard let method, let path else {
            return .failure(ProxyError(.badRequest, "the request has no :method or :path"))
        }
        if let host, let authority, !HTTPSyntax.sameIgnoringCase(host, authority) {
            return .failure(ProxyError(.badRequest, "the Host field and :authority name different hosts"))
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

    /// Methods whose requests a user agent sends without `content-length` when they have no body (RFC 9110
    /// section 8.6).
    private static func expectsNoBody(_ method: HTTPMethod) -> Bool {
        switch method {
        case .GET, .HEAD, .DELETE, .CONNECT, .TRACE, .OPTIONS: true
        default: false
        }
    }
}
