import NIOCore
import NIOHTTP1
import SDUIProxyCore

/// Invalidation by unsafe methods (RFC 9111 section 4.4): a 2xx or 3xx answer to any method but the safe ones
/// (POST, PUT, DELETE, PATCH, and methods this proxy has never heard of alike) makes the stored responses for its
/// target, and for the same-origin `Location` and `Content-Location` it returns, unusable, in every variant and
/// platform.
enum Invalidation {
    static func apply(
        method: HTTPMethod,
        target: RequestTarget,
        status: HTTPResponseStatus,
        responseHeaders: HTTPHeaders,
        requestHost: String?,
        invalidator: CacheInvalidator
    ) {
        guard
            let invalidation = invalidation(
                method: method,
                target: target,
                status: status,
                responseHeaders: responseHeaders,
                requestHost: requestHost
            )
        else { return }
        invalidator.invalidate(invalidation)
    }

    /// The (hard) invalidation a response to `method` on `target` calls for, or nil when it calls for none.
    static func invalidation(
        method: HTTPMethod,
        target: RequestTarget,
        status: HTTPResponseStatus,
        responseHeaders: HTTPHeaders,
        requestHost: String?
    ) -> CacheInvalidation? {
        // Safe methods change nothing (GET and HEAD reach this only on a route that bypasses the cache).
        guard !method.isSafe, (200..<400).contains(status.code) else { return nil }
        var targets = [target.description]
        for name in ["location", "content-location"] {
            if let value = responseHeaders.first(name: name),
                let related = sameOriginTarget(value, requestHost: requestHost), !targets.contains(related)
            {
                targets.append(related)
            }
        }
        return CacheInvalidation(.targets(targets))
    }

    /// The normalised target of a URI reference on the proxy's own origin: a path, or an absolute URL whose
    /// authority is the request's `Host`. Anything else is another origin and is left alone.
    static func sameOriginTarget(_ reference: String, requestHost: String?) -> String? {
        if reference.hasPrefix("/"), !reference.hasPrefix("//") {
            return try? RequestTarget(parsing: reference).description
        }
        guard let url = AbsoluteURL(parsing: reference), let requestHost else { return nil }
        let authority = requestHost.lowercased()
        let defaultPort = url.scheme == "https" ? 443 : 80
        let sameOrigin = authority == "\(url.host):\(url.port)" || (authority == url.host && url.port == defaultPort)
        guard sameOrigin else { return nil }
        let text = url.query.map { url.path + "?" + $0 } ?? url.path
        return try? RequestTarget(parsing: text).description
    }
}
