import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a test starts the `sdui-proxy` executable: directly, as this process's user, or through `setpriv` as an
/// unprivileged user without capabilities, as the container image runs it.
struct ProxyLaunch: Sendable {
    /// What `posix_spawn` runs.
    var executable: String
    /// The arguments before the proxy's own.
    var arguments: [String]
    /// The child's working directory.
    var directory: String

    /// The built executable, from the repository's root.
    static var direct: ProxyLaunch {
        ProxyLaunch(
            executable: ProcessTests.executable.path,
            arguments: [],
            directory: ProcessTests.repositoryRoot.path
        )
    }

    /// The user and group the image's `sdui` user stands for here: `nobody`.
    static let unprivilegedID = 65534

    /// `setpriv` on the PATH, if any.
    static var setpriv: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        return path.split(separator: ":").map { $0 + "/setpriv" }.first { access($0, X_OK) == 0 }
    }

    /// Whether this process may drop a child's privileges: it runs as root.
    static var isRoot: Bool { getuid() == 0 }

    /// A directory of its own, readable by anyone, holding a copy of the proxy and `files` (name → contents):
    /// the build directory may sit under one that uid 65534 cannot enter. The launch runs the copy from there as
    /// uid and gid 65534, no supplementary groups, and no capabilities (none inheritable, an empty bounding
    /// set, and no way to gain any back).
    ///
    /// Only for a root test process, with `setpriv` installed; remove ``Unprivileged/directory`` afterwards.
    static func unprivileged(files: [String: String] = [:]) throws -> Unprivileged {
        guard let setpriv else { throw LaunchError("setpriv is not installed") }
        let directory = NSTemporaryDirectory() + "sdui-unprivileged-" + UUID().uuidString
        let manager = FileManager.default
        try manager.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let proxy = directory + "/sdui-proxy"
        try manager.copyItem(atPath: ProcessTests.executable.path, toPath: proxy)
        for (name, contents) in files {
            try contents.write(toFile: directory + "/" + name, atomically: false, encoding: .utf8)
            guard chmod(directory + "/" + name, 0o644) == 0 else { throw LaunchError("chmod \(name): errno \(errno)") }
        }
        guard chmod(proxy, 0o755) == 0, chmod(directory, 0o755) == 0 else {
            throw LaunchError("chmod in \(directory): errno \(errno)")
        }
        let id = String(unprivilegedID)
        let launch = ProxyLaunch(
            executable: setpriv,
            arguments: [
                "--reuid=\(id)", "--regid=\(id)", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
                "--no-new-privs", "--", proxy,
            ],
            directory: directory
        )
        return Unprivileged(launch: launch, directory: directory)
    }

    struct Unprivileged {
        var launch: ProxyLaunch
        /// Holds the proxy's copy and the files; the launch's working directory.
        var directory: String

        func remove() {
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    struct LaunchError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The `Uid:`, `Gid:` and `Cap*:` lines of a running process's `/proc/<pid>/status`, by name; empty where
    /// there is no `/proc`.
    static func credentials(of pid: pid_t) -> [String: String] {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return [:] }
        var result: [String: String] = [:]
        for line in status.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2,
                ["Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
                    .contains(String(parts[0]))
            else { continue }
            result[String(parts[0])] = parts[1].split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(
                separator: " "
            )
        }
        return result
    }
}
