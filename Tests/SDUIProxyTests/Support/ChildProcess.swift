import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, its standard error collected as it arrives and its standard output
/// dropped.
///
/// Foundation's `Process.run()` on Linux crashes now and then in this toolchain: it copies the whole 256-byte
/// `d_name` of each `/proc/self/fd` entry, which can read past the end of glibc's directory buffer into an unmapped
/// page (swift-corelibs-foundation pull request 5472). The suite spawns the proxy often enough to hit it.
final class ChildProcess: Sendable {
    let processIdentifier: pid_t
    private let exitStatus = NIOLockedValueBox<Int32?>(nil)
    private let errorBytes = NIOLockedValueBox<[UInt8]>([])
    /// Set once the reader has seen the end of standard error.
    private let errorClosed = NIOLockedValueBox(false)

    struct SpawnFailed: Error {
        var call: String
        var code: Int32
    }

    /// Starts `executable` in `directory` with exactly `environment`. The child gets no descriptor of this process
    /// but its three standard ones.
    init(executable: String, arguments: [String], directory: String, environment: [String: String]) throws {
        var fileDescriptors: [Int32] = [-1, -1]
        guard pipe(&fileDescriptors) == 0 else { throw SpawnFailed(call: "pipe", code: errno) }
        let (readEnd, writeEnd) = (fileDescriptors[0], fileDescriptors[1])
        // Children spawned meanwhile close everything past their standard descriptors anyway; this covers anything
        // else this process starts.
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)
        _ = spawnAddCloseFrom(&actions, 3)
        _ = spawnAddChangeDirectory(&actions, directory)

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        close(writeEnd)
        guard result == 0 else {
            close(readEnd)
            throw SpawnFailed(call: "posix_spawn", code: result)
        }
        processIdentifier = pid

        // A thread of its own: a blocking read must not hold one of the concurrency pool's few threads.
        let errorBytes = self.errorBytes
        let errorClosed = self.errorClosed
        Thread.detachNewThread {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(readEnd, &chunk, chunk.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                errorBytes.withLockedValue { $0.append(contentsOf: chunk[0..<count]) }
            }
            close(readEnd)
            errorClosed.withLockedValue { $0 = true }
        }
    }

    /// What the child has written to standard error so far.
    var standardError: String { String(decoding: errorBytes.withLockedValue { $0 }, as: UTF8.self) }

    var isRunning: Bool { reap(blocking: false) == nil }

    /// The exit status, or the number of the signal that ended the child (as Foundation's `Process` reports it);
    /// nil while it runs.
    var terminationStatus: Int32? { reap(blocking: false) }

    /// Waits for the child to end, and for the end of its standard error.
    func waitUntilExit() -> Int32 {
        let status = reap(blocking: true) ?? -1
        while !errorClosed.withLockedValue({ $0 }) { usleep(1000) }
        return status
    }

    func signal(_ number: Int32) {
        // Only a child not yet reaped: its pid could belong to another process by now.
        guard isRunning else { return }
        kill(processIdentifier, number)
    }

    private func reap(blocking: Bool) -> Int32? {
        exitStatus.withLockedValue { exitStatus in
            if let exitStatus { return exitStatus }
            var status: Int32 = 0
            var reaped: pid_t
            repeat {
                reaped = waitpid(processIdentifier, &status, blocking ? 0 : WNOHANG)
            } while reaped < 0 && errno == EINTR
            guard reaped == processIdentifier else { return nil }
            // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import as functions.
            let signal = status & 0x7f
            exitStatus = signal == 0 ? (status >> 8) & 0xff : signal
            return exitStatus
        }
    }
}

// glibc's GNU extensions to posix_spawn, which its module map leaves out; named apart from them so that a Glibc
// that does export them does not make the calls ambiguous.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func spawnAddCloseFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32
@_silgen_name("posix_spawn_file_actions_addchdir_np")
private func spawnAddChangeDirectory(
    _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>,
    _ path: UnsafePointer<CChar>
) -> Int32
