import NIOCore
import NIOPosix
import SDUIProxyCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A temporary file that holds one request body too large to keep in memory (`limits.requestBufferBytes`), in
/// `limits.requestBufferDirectory`.
///
/// Every system call runs on the thread pool, never on an event loop: a disk that stalls stalls the pool's
/// threads, not the connections. The file is created new (never one that exists), readable by the process's user
/// only, under a random name that owes nothing to what the client sent; ``remove()`` closes and deletes it, once,
/// however often it is called.
final class RequestSpoolFile: Sendable {
    /// What every spool file's name starts with, so an operator can tell them apart in a shared directory.
    static let namePrefix = "sdui-proxy-body-"

    /// The file's path: the directory, then ``namePrefix`` and 128 random bits in hex.
    let path: String
    private let threadPool: NIOThreadPool
    /// The open descriptor; nil once the file is removed.
    private let descriptor: Mutex<CInt?>

    private init(path: String, descriptor: CInt, threadPool: NIOThreadPool) {
        self.path = path
        self.threadPool = threadPool
        self.descriptor = Mutex(descriptor)
    }

    deinit {
        // A backstop only: every owner removes its file when its request ends. One dropped without that would
        // otherwise stay on the disk until someone deletes it.
        descriptor.withLock { descriptor in
            guard let open = descriptor else { return }
            descriptor = nil
            _ = close(open)
            _ = unlink(path)
        }
    }

    /// The system's temporary directory: `TMPDIR`, else `/tmp`.
    static var systemTemporaryDirectory: String {
        if let value = getenv("TMPDIR"), let directory = String(validatingCString: value), !directory.isEmpty {
            return directory
        }
        return "/tmp"
    }

    /// Creates a new spool file in `directory`.
    static func create(
        in directory: String,
        threadPool: NIOThreadPool,
        eventLoop: any EventLoop
    ) -> EventLoopFuture<RequestSpoolFile> {
        threadPool.runIfActive(eventLoop: eventLoop) { () throws -> RequestSpoolFile in
            // A name already taken (all but impossible with 128 random bits) is never opened: another is drawn.
            for _ in 0..<4 {
                let path = Self.path(in: directory, name: namePrefix + SecureRandomID.make())
                let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                if descriptor >= 0 {
                    return RequestSpoolFile(path: path, descriptor: descriptor, threadPool: threadPool)
                }
                let code = errno
                guard code == EEXIST else { throw failure("cannot create a file in \(directory)", code: code) }
            }
            throw failure("cannot create a file in \(directory)", code: EEXIST)
        }
    }

    /// Writes `parts` one after the other from `offset`.
    func write(_ parts: [ByteBuffer], at offset: Int, eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        threadPool.runIfActive(eventLoop: eventLoop) { () throws in
            try self.descriptor.withLock { descriptor throws in
                guard let descriptor else { throw Self.failure("the file was removed", code: EBADF) }
                var position = offset
                for part in parts {
                    try part.withUnsafeReadableBytes { bytes throws in
                        var written = 0
                        while written < bytes.count {
                            let count = pwrite(
                                descriptor,
                                bytes.baseAddress! + written,
                                bytes.count - written,
                                off_t(position + written)
                            )
                            if count < 0 {
                                let code = errno
                                if code == EINTR { continue }
                                throw Self.failure("cannot write the request body", code: code)
                            }
                            written += count
                        }
                    }
                    position += part.readableBytes
                }
            }
        }
    }

    /// Reads up to `count` bytes from `offset`: fewer only at the end of the file.
    func read(
        at offset: Int,
        count: Int,
        allocator: ByteBufferAllocator,
        eventLoop: any EventLoop
    ) -> EventLoopFuture<ByteBuffer> {
        threadPool.runIfActive(eventLoop: eventLoop) { () throws -> ByteBuffer in
            try self.descriptor.withLock { descriptor throws -> ByteBuffer in
                guard let descriptor else { throw Self.failure("the file was removed", code: EBADF) }
                var buffer = allocator.buffer(capacity: count)
                try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { bytes throws -> Int in
                    var read = 0
                    while read < count {
                        let got = pread(descriptor, bytes.baseAddress! + read, count - read, off_t(offset + read))
                        if got < 0 {
                            let code = errno
                            if code == EINTR { continue }
                            throw Self.failure("cannot read the request body back", code: code)
                        }
                        if got == 0 { break }
                        read += got
                    }
                    return read
                }
                return buffer
            }
        }
    }

    /// The file's first `length` bytes as a request body for the backend, read a part at a time as the exchange
    /// takes them (reading pauses while the stream holds more than its high watermark).
    func stream(length: Int, on eventLoop: any EventLoop) -> RequestBodyStream {
        let stream = RequestBodyStream(eventLoop: eventLoop, contentLength: length)
        readPart(from: 0, length: length, into: stream)
        return stream
    }

    /// How much one read takes from the file.
    private static let readSize = 64 * 1024

    private func readPart(from offset: Int, length: Int, into stream: RequestBodyStream) {
        guard offset < length else { return stream.finish() }
        guard !stream.hasFailed else { return }
        let count = min(Self.readSize, length - offset)
        read(at: offset, count: count, allocator: ByteBufferAllocator(), eventLoop: stream.eventLoop).whenComplete {
            result in
            switch result {
            case .success(let part) where part.readableBytes > 0:
                let next = offset + part.readableBytes
                if stream.append(part) { return self.readPart(from: next, length: length, into: stream) }
                // Weakly: the stream holds its demand handler, and the exchange holds the stream while it needs it.
                stream.setDemandHandler { [weak stream] in
                    guard let stream else { return }
                    self.readPart(from: next, length: length, into: stream)
                }
            case .success:
                stream.fail(ProxyError(.internalError, "the buffered request body was shorter than it was written"))
            case .failure(let error):
                stream.fail(error)
            }
        }
    }

    /// Closes and deletes the file; later calls do nothing.
    func remove(eventLoop: any EventLoop) {
        let removal = threadPool.runIfActive(eventLoop: eventLoop) { self.removeNow() }
        // A pool already shut down (the process is stopping) runs nothing: the file goes at once all the same.
        removal.whenFailure { _ in self.removeNow() }
    }

    /// Whether ``remove()`` has run.
    var isRemoved: Bool { descriptor.withLock { $0 == nil } }

    private func removeNow() {
        descriptor.withLock { descriptor in
            guard let open = descriptor else { return }
            descriptor = nil
            _ = close(open)
            _ = unlink(path)
        }
    }

    private static func path(in directory: String, name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    private static func failure(_ what: String, code: CInt) -> ProxyError {
        let reason = String(cString: strerror(code))
        return ProxyError(
            .unavailable,
            "the request body could not be buffered in limits.requestBufferDirectory",
            detail: "\(what): \(reason)"
        )
    }
}
