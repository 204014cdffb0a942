import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Keeps a second process off a queue store: two deliverers over one store would send each pending write
/// twice, and their sequential routes would interleave.
///
/// A POSIX record lock (`fcntl(F_SETLK)`) on `queue.lock` in the store directory, held while the store is open.
/// The kernel lets it go when the process ends, however it ends, so a crash leaves no stale lock to clean up.
/// It belongs to the process, not the descriptor: it keeps other processes off, not a second store opened in
/// this one (one store per directory is the caller's to keep; the proxy opens one). A POSIX lock ends when the
/// process closes any descriptor of its file, so only this type opens it, and only ``release()`` closes it.
final class QueueStoreLock: Sendable {
    /// The lock file's name inside the store directory.
    static let fileName = "queue.lock"

    /// The lock file's descriptor; -1 once released, so that a second release closes nothing (the number may
    /// name another file by then).
    private let descriptor: Atomic<Int32>

    private init(descriptor: Int32) {
        self.descriptor = Atomic(descriptor)
    }

    /// Takes the lock of the store in `directory`, or says which process holds it.
    static func acquire(directory: String) throws -> QueueStoreLock {
        let path = directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            throw QueueStoreError("cannot open the queue lock file \(path) (errno \(errno))")
        }
        var lock = wholeFileWriteLock()
        guard fcntl(descriptor, F_SETLK, &lock) == 0 else {
            let code = errno
            var holder = wholeFileWriteLock()
            let pid = fcntl(descriptor, F_GETLK, &holder) == 0 && holder.l_type != Int16(F_UNLCK) ? holder.l_pid : 0
            close(descriptor)
            guard code == EAGAIN || code == EACCES else {
                throw QueueStoreError("cannot lock the queue store \(directory) (errno \(code))")
            }
            throw QueueStoreError(
                "the queue store \(directory) is in use by another process\(pid > 0 ? " (pid \(pid))" : ""); "
                    + "each proxy needs a queue.store of its own"
            )
        }
        return QueueStoreLock(descriptor: descriptor)
    }

    /// Lets the lock go.
    func release() {
        let open = descriptor.exchange(-1, ordering: .relaxed)
        if open >= 0 { close(open) }
    }

    private static func wholeFileWriteLock() -> flock {
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 0
        return lock
    }
}
