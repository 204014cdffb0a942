import NIOCore
import NIOHTTP1
import SDUIProxyCore

extension ComponentFetcher {
    /// A fill's answer with any content coding the backend applied undone.
    enum DecodedAnswer {
        /// The answer in identity; `reserved` bytes of the fill budget hold its decoded body until it is stored.
        case identity(UpstreamResponse, reserved: Int)
        /// The answer names a coding the proxy cannot decode: it is passed on as it came, and not stored.
        case unknownCoding(String)
    }

    /// The answer in identity. Fills ask for `Accept-Encoding: identity`, but a backend may send `gzip`,
    /// `deflate` or `br` anyway: the body is decoded (in the reverse order of the codings listed), so that its
    /// component is validated, and no client is sent a coding it did not ask for; the stored answer is as if it
    /// had come so. Its `ETag` named the coded bytes, so it goes too, and the entry computes its own.
    ///
    /// The decoded body is bounded by `upstream.maxResponseBytes` and by what the fill budget has left, and takes
    /// its share of that budget; a body that does not decode is a `decoding` error, never stored.
    func decodingContentCoding(of response: UpstreamResponse, for request: Request) throws(ProxyError) -> DecodedAnswer
    {
        let target = request.upstream.target
        var codings: [ContentCoding] = []
        var unknown: [String] = []
        response.fields.forEachListMember(of: "content-encoding") { member in
            let token = String(decoding: member, as: UTF8.self)
            if let coding = ContentCoding(token: token) {
                codings.append(coding)
            } else if token.lowercased() != "identity" {
                unknown.append(token)
            }
        }
        guard unknown.isEmpty else { return .unknownCoding(unknown.joined(separator: ", ")) }
        guard !codings.isEmpty else { return .identity(response, reserved: 0) }

        let available = bufferBudget.map { max(0, $0.limit - $0.inUse) } ?? Int.max
        let limit = min(maxResponseBytes, available)
        var body = response.body
        for coding in codings.reversed() {
            do {
                body = try ContentCoder.decode(body, from: coding, maxBytes: limit)
            } catch {
                switch error {
                case .tooLarge where limit < maxResponseBytes:
                    throw ProxyError(
                        .fillBudgetFull,
                        "the backend's \(coding) body decodes to more than the fills may hold now"
                    )
                case .tooLarge:
                    throw ProxyError(
                        .upstreamTooLarge,
                        "the backend's \(coding) body decodes to more than upstream.maxResponseBytes"
                    )
                case .corrupt(let reason):
                    failureLog.log(
                        level: .warning,
                        "a body in a content coding did not decode, not cached",
                        key: target,
                        kind: "decoding",
                        metadata: request.logMetadata([
                            "target": "\(target)", "coding": "\(coding)", "reason": "\(reason)",
                        ])
                    )
                    throw ProxyError(.decoding, "the backend's \(coding) body does not decode: \(reason)")
                }
            }
        }
        if let bufferBudget, !bufferBudget.reserve(body.readableBytes) {
            throw ProxyError(.fillBudgetFull, "the backend's decoded body is more than the fills may hold now")
        }
        var headers = response.headers
        for name in ["content-encoding", "content-length", "etag"] { headers.remove(name: name) }
        let decoded = UpstreamResponse(status: response.status, headers: headers, body: body)
        return .identity(decoded, reserved: bufferBudget == nil ? 0 : body.readableBytes)
    }
}
