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
/// holder writes its pid into the file, so that a refused process can say who holds the store.
final class QueueStoreLock: Sendable {
    /// The lock file's name inside the store directory.
    static let fileName = "queue.lock"

    /// The lock file's descriptor; -1 once released, so that a second release closes nothing (the number may
    /// name another file by then).
    private let descriptor: Atomic<Int32>

    private init(descriptor: Int32) {
        self.descriptor = Atomic(descriptor)
    }

    /// Takes the lock of the store in `directory`, or says who holds it.
    static func acquire(directory: String) throws -> QueueStoreLock {
        let path = directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            throw QueueStoreError("cannot open the queue lock file \(path) (errno \(errno))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = holderPID(descriptor)
            close(descriptor)
            guard code == EWOULDBLOCK else {
                throw QueueStoreError("cannot lock the queue store \(directory) (errno \(code))")
            }
            if holder == getpid() {
                throw QueueStoreError("the queue store \(directory) is already open in this process")
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
        return QueueStoreLock(descriptor: descriptor)
    }

    /// Lets the lock go.
    func release() {
        let open = descriptor.exchange(-1, ordering: .relaxed)
        if open >= 0 { close(open) }
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
