import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SDUIProxyCore
import Testing

@testable import SDUIProxy

@Suite("A forwarded body read whole: memory, then a file")
struct RequestBodyBufferTests {
    /// A buffer on a loop of its own, writing to a new directory that is removed afterwards.
    static func withBuffer(
        memoryLimit: Int,
        directory: String? = nil,
        _ body: (NIOLoopBound<RequestBodyBuffer>, any EventLoop, String) async throws -> Void
    ) async throws {
        let spool = FileManager.default.temporaryDirectory
            .appendingPathComponent("sdui-proxy-buffer-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let buffer = try await loop.submit {
            NIOLoopBound(
                RequestBodyBuffer(
                    eventLoop: loop,
                    memoryLimit: memoryLimit,
                    directory: directory ?? spool,
                    threadPool: .singleton
                ),
                eventLoop: loop
            )
        }.get()
        try await body(buffer, loop, spool)
    }

    static func files(in directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    }

    /// The body once `finish` hands it over.
    static func finish(
        _ buffer: NIOLoopBound<RequestBodyBuffer>,
        on loop: any EventLoop
    ) async throws -> RequestBodyBuffer.Body {
        let promise = loop.makePromise(of: RequestBodyBuffer.Body.self)
        try await loop.submit { buffer.value.finish { result in promise.completeWith(result) } }.get()
        return try await promise.futureResult.get()
    }

    @Test("within the memory limit the body stays in memory, whole, and no file is made")
    func inMemory() async throws {
        try await Self.withBuffer(memoryLimit: 16) { buffer, loop, spool in
            let accepted = try await loop.submit {
                [
                    buffer.value.append(ByteBuffer(string: "0123456789")),
                    buffer.value.append(ByteBuffer(string: "abcdef")),
                ]
            }.get()
            #expect(accepted == [true, true])
            guard case .whole(let body) = try await Self.finish(buffer, on: loop) else {
                Issue.record("a body within the limit went to a file")
                return
            }
            #expect(String(buffer: body) == "0123456789abcdef")
            #expect(Self.files(in: spool).isEmpty)
        }
    }

    @Test("past the memory limit every part goes to the file in order; the file holds the whole body")
    func spooledInOrder() async throws {
        try await Self.withBuffer(memoryLimit: 1000) { buffer, loop, spool in
            let parts = (0..<200).map { ByteBuffer(repeating: UInt8($0), count: 997) }
            try await loop.submit {
                // A client would be paused at times; the parts are all taken regardless.
                for part in parts { _ = buffer.value.append(part) }
            }.get()
            let expected = parts.reduce(into: ByteBuffer()) { whole, part in whole.writeImmutableBuffer(part) }
            guard case .spooled(let file, let length) = try await Self.finish(buffer, on: loop) else {
                Issue.record("a body past the limit stayed in memory")
                return
            }
            #expect(length == 200 * 997)
            #expect(Self.files(in: spool) == [URL(fileURLWithPath: file.path).lastPathComponent])
            let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
            #expect(attributes[.posixPermissions] as? Int == 0o600, "readable by the proxy's user only")
            let written = try Data(contentsOf: URL(fileURLWithPath: file.path))
            #expect(written == Data(expected.readableBytesView))
            file.remove(eventLoop: loop)
            try await waitUntil { Self.files(in: spool).isEmpty }
        }
    }

    @Test("a client far ahead of the disk is asked to pause, and to go on once the writes catch up")
    func backpressure() async throws {
        try await Self.withBuffer(memoryLimit: 0) { buffer, loop, _ in
            let resumed = NIOLockedValueBox(false)
            let paused = try await loop.submit {
                buffer.value.setDemandHandler { resumed.withLockedValue { $0 = true } }
                // Taken within one loop turn, before any write ends: the bytes waiting pass the high watermark.
                var accepted = true
                for _ in 0..<8 where accepted {
                    accepted = buffer.value.append(ByteBuffer(repeating: 1, count: 64 * 1024))
                }
                return !accepted
            }.get()
            #expect(paused)
            try await waitUntil { resumed.withLockedValue { $0 } }
            guard case .spooled(let file, _) = try await Self.finish(buffer, on: loop) else {
                Issue.record("no file")
                return
            }
            file.remove(eventLoop: loop)
        }
    }

    @Test("a body discarded while it is written leaves no file once the write has ended")
    func discardWhileWriting() async throws {
        try await Self.withBuffer(memoryLimit: 0) { buffer, loop, spool in
            try await loop.submit {
                _ = buffer.value.append(ByteBuffer(repeating: 2, count: 512 * 1024))
                buffer.value.discard()
            }.get()
            try await waitUntil { Self.files(in: spool).isEmpty }
            // Nothing is taken after a discard.
            #expect(try await loop.submit { buffer.value.append(ByteBuffer(string: "late")) }.get())
        }
    }

    @Test("a directory the file cannot be made in fails the body with an error naming the key")
    func unwritableDirectory() async throws {
        try await Self.withBuffer(memoryLimit: 4, directory: "/nonexistent-sdui-proxy-spool") { buffer, loop, _ in
            _ = try await loop.submit { buffer.value.append(ByteBuffer(string: "more than four")) }.get()
            await #expect {
                _ = try await Self.finish(buffer, on: loop)
            } throws: { error in
                let proxyError = error as? ProxyError
                return proxyError?.kind == .unavailable
                    && proxyError?.message.contains("limits.requestBufferDirectory") == true
            }
        }
    }
}
