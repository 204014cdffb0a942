import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A ``NetworkClient`` that serves a directory of files as if it were a backend: the bundled demo and tests
/// run on it.
///
/// `/screens/home` is answered from `screens/home`, `screens/home.json` or `screens/home/index.json`, in
/// that order. Only GET and HEAD succeed (other methods get 405). The path is normalised before it gets here;
/// on top of that, segments starting with `.` and percent-encoded bytes are refused, and the resolved file
/// must lie inside the directory even through symbolic links, so no request can read outside it.
public final class FileNetworkClient: NetworkClient {
    private let rootPath: String
    private let threadPool: NIOThreadPool

    /// - Parameter directory: the directory to serve; it must exist.
    public init(directory: String, threadPool: NIOThreadPool) throws(ProxyError) {
        guard let resolved = Self.realPath(directory) else {
            throw ProxyError(.url, "the upstream directory \(directory) does not exist")
        }
        self.rootPath = resolved
        self.threadPool = threadPool
    }

    public func fetch(
        _ request: UpstreamRequest,
        maxBodyBytes: Int,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<UpstreamResponse> {
        guard request.method.isGETOrHEAD else {
            let refusal = ProxyError(.methodNotAllowed, "the file backend only serves GET and HEAD")
            return eventLoop.makeSucceededFuture(Self.errorResponse(refusal, extraHeaders: [("Allow", "GET, HEAD")]))
        }
        let rootPath = self.rootPath
        let path = request.target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "/"
        return threadPool.runIfActive(eventLoop: eventLoop) { () throws -> UpstreamResponse in
            try Self.read(path: path, rootPath: rootPath, maxBodyBytes: maxBodyBytes)
        }
    }

    /// A file is read whole, so one too large to hold for the cache is not read for a forward either.
    public var streamsResponses: Bool { false }

    public func forward(
        _ request: UpstreamRequest,
        body: RequestBodyStream?,
        on eventLoop: any EventLoop,
        to sink: any ForwardedResponseSink
    ) -> EventLoopFuture<Void> {
        let drained = body?.drain { _ in eventLoop.makeSucceededVoidFuture() } ?? eventLoop.makeSucceededVoidFuture()
        return drained.flatMap {
            self.fetch(request, maxBodyBytes: Int(Int32.max), on: eventLoop)
        }.flatMap { response in
            sink.receiveHead(status: response.status, headers: response.headers)
            let sent =
                request.method.isHEAD ? eventLoop.makeSucceededVoidFuture() : sink.receiveBodyPart(response.body)
            return sent.map { sink.receiveEnd() }
        }
    }

    public func shutdown() async throws {}

    // MARK: Reading files (on the thread pool)

    private static func read(path: String, rootPath: String, maxBodyBytes: Int) throws -> UpstreamResponse {
        let segments = path.split(separator: "/")
        guard
            !segments.contains(where: {
                $0.hasPrefix(".") || $0.contains("%" as Character) || $0.contains("\\" as Character)
            })
        else {
            return notFound(path)
        }
        let base = rootPath + "/" + segments.joined(separator: "/")
        let candidates = path.hasSuffix("/") ? [base + "/index.json"] : [base, base + ".json", base + "/index.json"]
        for candidate in candidates {
            guard let resolved = realPath(candidate), resolved.hasPrefix(rootPath + "/") else { continue }
            var info = stat()
            guard stat(resolved, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            guard Int(info.st_size) <= maxBodyBytes else {
                throw ProxyError(.upstreamTooLarge, "the backend's response is larger than \(maxBodyBytes) bytes")
            }
            guard let body = readFile(resolved, size: Int(info.st_size)) else {
                throw ProxyError(.network, "the file backend could not read \(path)")
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: contentType(forPath: resolved))
            headers.add(name: "Date", value: HTTPDate.format(HTTPDate.now()))
            headers.add(name: "Last-Modified", value: HTTPDate.format(Int64(info.st_mtim.tv_sec)))
            return UpstreamResponse(status: .ok, headers: headers, body: body)
        }
        return notFound(path)
    }

    private static func notFound(_ path: String) -> UpstreamResponse {
        errorResponse(ProxyError(.notFound, "no file for \(path)"))
    }

    /// An answer in the error model. Like every error the proxy makes, it is `no-store`: a file added later is
    /// served at once.
    private static func errorResponse(
        _ error: ProxyError,
        extraHeaders: [(String, String)] = []
    ) -> UpstreamResponse {
        var headers = HTTPHeaders([("Content-Type", "application/json"), ("Cache-Control", "no-store")])
        headers.add(contentsOf: extraHeaders)
        return UpstreamResponse(status: error.status, headers: headers, body: ByteBuffer(string: error.jsonBody()))
    }

    private static func readFile(_ path: String, size: Int) -> ByteBuffer? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = ByteBufferAllocator().buffer(capacity: size)
        var remaining = size
        while remaining > 0 {
            let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: remaining) { pointer in
                let result = Glibc.read(descriptor, pointer.baseAddress, remaining)
                return result > 0 ? result : 0
            }
            if count == 0 { break }
            remaining -= count
        }
        return buffer
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func contentType(forPath path: String) -> String {
        let fileExtension = path.split(separator: ".").last.map { $0.lowercased() } ?? ""
        switch fileExtension {
        case "json": return "application/json"
        case "png": return "image/png"
        case "jpg", "jpeg": return "image/jpeg"
        case "gif": return "image/gif"
        case "webp": return "image/webp"
        case "svg": return "image/svg+xml"
        case "html": return "text/html; charset=utf-8"
        case "txt": return "text/plain; charset=utf-8"
        default: return "application/octet-stream"
        }
    }
}
