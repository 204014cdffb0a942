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
/// Two guards, one for each kind of second deliverer:
/// - another process: a POSIX record lock (`fcntl(F_SETLK)`) on `queue.lock` in the store directory, held while
///   the store is open. The kernel lets it go when the process ends, however it ends, so a crash leaves no stale
///   lock to clean up, and a refused process learns the holder's pid from the kernel. Unlike `flock`, it is not
///   shared with a child forked while the store is open, so a store closed and opened again is free at once.
/// - this process: the lock files it holds, by device and inode. A POSIX lock belongs to the process, so it
///   would grant this process a second lock, and it ends when the process closes any descriptor of the file:
///   the file is looked up by its path, and a held one is never opened again.
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

    /// The lock files this process holds. Acquiring and releasing take its mutex for their whole work, so two
    /// stores opened at once in this process cannot both pass the check.
    private static let heldHere = Mutex<Set<FileIdentity>>([])

    private init(descriptor: Int32, file: FileIdentity) {
        self.descriptor = Atomic(descriptor)
        self.file = file
    }

    /// Takes the lock of the store in `directory`, or says who holds it.
    static func acquire(directory: String) throws -> QueueStoreLock {
        let path = directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
        return try heldHere.withLock { held in
            if let existing = FileIdentity(path: path), held.contains(existing) {
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
            var lock = wholeFileWriteLock()
            guard fcntl(descriptor, F_SETLK, &lock) == 0 else {
                let code = errno
                var holder = wholeFileWriteLock()
                let pid =
                    fcntl(descriptor, F_GETLK, &holder) == 0 && holder.l_type != Int16(F_UNLCK) ? holder.l_pid : 0
                close(descriptor)
                guard code == EAGAIN || code == EACCES else {
                    throw QueueStoreError("cannot lock the queue store \(directory) (errno \(code))")
                }
                throw QueueStoreError(
                    "the queue store \(directory) is in use by another process\(pid > 0 ? " (pid \(pid))" : ""); "
                        + "each proxy needs a queue.store of its own"
                )
            }
            held.insert(file)
            return QueueStoreLock(descriptor: descriptor, file: file)
        }
    }

    /// Lets the lock go.
    func release() {
        Self.heldHere.withLock { held in
            let open = descriptor.exchange(-1, ordering: .relaxed)
            guard open >= 0 else { return }
            close(open)
            held.remove(file)
        }
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
