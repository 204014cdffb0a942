import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Keeps a second deliverer off a queue store: two over one store would send each pending write twice, and
/// their sequential routes would interleave.
///
/// An exclusive `flock(2)` on `queue.lock` in the store directory, held while the store is open. It belongs to the
/// open file, not to the process: it keeps both another process and a second store opened in this one off. The
/// kernel lets it go when the process ends, however it ends, so a crash leaves no stale lock to clean up. The
/// holder writes its pid into the file, so that a refused process can say who holds the store. On a network
/// file system, whether another machine's proxy is kept off is the file system's to say (Linux's NFS client
/// maps `flock` to a lock the server keeps).
final class QueueStoreLock: Sendable {
    /// The lock file's name inside the store directory.
    static let fileName = "queue.lock"

    /// The lock file's descriptor; -1 once released, so that a second release closes nothing (the number may
    /// name another file by then).
    private let descriptor: Atomic<Int32>
    /// The lock file, as the device and inode this process holds it by.
    private let file: FileIdentity

    /// A file as the kernel knows it, whatever path led to it.
    private struct FileIdentity: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64

        init?(descriptor: Int32) {
            var status = stat()
            guard fstat(descriptor, &status) == 0 else { return nil }
            self.init(status)
        }

        init?(path: String) {
            var status = stat()
            guard stat(path, &status) == 0 else { return nil }
            self.init(status)
        }

        private init(_ status: stat) {
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
        }
    }

    /// The lock files this process holds: a refusal says whether the holder is this process without trusting
    /// the pid in the file (in a container, another process may be pid 1 too).
    private static let heldHere = Mutex<Set<FileIdentity>>([])

    private init(descriptor: Int32, file: FileIdentity) {
        self.descriptor = Atomic(descriptor)
        self.file = file
    }

    /// Takes the lock of the store in `directory`, or says who holds it.
    static func acquire(directory: String) throws -> QueueStoreLock {
        let path = directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
        // Asked first, from the path, and not left to the lock: where `flock` is emulated with POSIX locks (Linux's
        // NFS client), a second lock in this process would be granted, and closing a second descriptor of the
        // file would end the first one's lock.
        if let held = FileIdentity(path: path), heldHere.withLock({ $0.contains(held) }) {
            throw QueueStoreError("the queue store \(directory) is already open in this process")
        }
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            throw QueueStoreError("cannot open the queue lock file \(path) (errno \(errno))")
        }
        guard let file = FileIdentity(descriptor: descriptor) else {
            let code = errno
            close(descriptor)
            throw QueueStoreError("cannot read the queue lock file \(path) (errno \(code))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = holderPID(descriptor)
            close(descriptor)
            guard code == EWOULDBLOCK else {
                throw QueueStoreError("cannot lock the queue store \(directory) (errno \(code))")
            }
            throw QueueStoreError(
                "the queue store \(directory) is in use by another process\(holder.map { " (pid \($0))" } ?? ""); "
                    + "each proxy needs a queue.store of its own"
            )
        }
        let pid = Array("\(getpid())\n".utf8)
        // The pid only names the holder in a refusal; the lock holds whether or not it could be written.
        if ftruncate(descriptor, 0) == 0 {
            _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        }
        heldHere.withLock { _ = $0.insert(file) }
        return QueueStoreLock(descriptor: descriptor, file: file)
    }

    /// Lets the lock go.
    func release() {
        let open = descriptor.exchange(-1, ordering: .relaxed)
        guard open >= 0 else { return }
        Self.heldHere.withLock { _ = $0.remove(file) }
        close(open)
    }

    /// The pid the holder wrote, if it has written one yet.
    private static func holderPID(_ descriptor: Int32) -> pid_t? {
        var bytes = [UInt8](repeating: 0, count: 16)
        let count = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: bytes[..<count], as: UTF8.self)
        return text.split(separator: "\n").first.flatMap { pid_t($0) }.flatMap { $0 > 0 ? $0 : nil }
    }
}
