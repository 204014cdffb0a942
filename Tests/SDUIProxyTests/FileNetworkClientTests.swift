import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("The file-backed backend")
struct FileNetworkClientTests {
    @Test("its 404 and 405 are error-model answers that are never stored")
    func errorsAreNoStore() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sdui-files-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let client = try FileNetworkClient(directory: directory.path, threadPool: NIOThreadPool.singleton)
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()

        let missing = try await client.fetch(
            UpstreamRequest(method: .GET, target: "/screens/missing", headers: [:]),
            maxBodyBytes: 1 << 20,
            on: eventLoop
        ).get()
        #expect(missing.status == .notFound)
        #expect(missing.headers["cache-control"] == ["no-store"])
        #expect(String(buffer: missing.body).contains(#""kind":"notFound""#))

        let post = try await client.fetch(
            UpstreamRequest(method: .POST, target: "/screens/missing", headers: [:]),
            maxBodyBytes: 1 << 20,
            on: eventLoop
        ).get()
        #expect(post.status == .methodNotAllowed)
        #expect(post.headers["cache-control"] == ["no-store"])
        #expect(post.headers["allow"] == ["GET, HEAD"])
    }
}
