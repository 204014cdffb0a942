import SDUIProxyCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What start-up refuses in a configuration that loaded, short of binding its ports: `--check-config` runs
/// these same checks, so a config it passes does not fail at start for a reason it could have seen.
///
/// - the admin listener's binding rule (``AdminAuthorization/checkBinding(host:)``);
/// - both listener hosts resolve to an address;
/// - a `file:` upstream is a directory that can be read; an `upstream.caFile` goes with an `https://` upstream and
///   is a readable PEM file of certificates;
/// - `queue.store` is a writable directory, or one that can be created, and its SQLite file, when there,
///   can be read and written (a `postgres://` store is not checked: a replica starts while its database is down);
/// - a `limits.requestBufferDirectory` is a directory the proxy can write in;
/// - `listen.tls`'s certificate and key can be read, hold a certificate and a key, and belong together.
///
/// The queue store's lock is not tried: a running proxy holds it, and the checks run before a SIGHUP to it.
/// Nothing is created or changed.
public enum StartupChecks {
    /// Refuses what start-up would refuse in `configuration`.
    public static func check(
        _ configuration: ProxyConfiguration,
        adminAuthorization: AdminAuthorization
    ) throws(ConfigurationError) {
        try adminAuthorization.checkBinding(host: configuration.admin.host)
        try checkHost(configuration.listen.host, key: "listen.host")
        try checkHost(configuration.admin.host, key: "admin.host")
        if let tls = configuration.listenProtocols.tls { try checkListenerTLS(tls) }
        try checkUpstream(configuration.upstream)
        if let directory = configuration.limits.requestBufferDirectory { try checkRequestBufferDirectory(directory) }
        // A PostgreSQL store is not tried here: a replica starts while its database is down.
        if let queue = configuration.queue {
            switch try? queue.storeLocation {
            case .sqlite(let directory)?: try checkQueueStore(directory)
            case .postgres?: try checkLease(queue, upstream: configuration.upstream)
            case nil: break
            }
        }
    }

    /// Refuses a `file:` upstream that is not a readable directory, and a CA file that cannot serve (what a
    /// reload checks of the upstream).
    public static func checkUpstream(_ upstream: ProxyConfiguration.Upstream) throws(ConfigurationError) {
        if let caFile = upstream.caFile { try checkCAFile(caFile, upstream: upstream) }
        guard case .directory(let path)? = try? UpstreamOrigin(parsing: upstream.url) else { return }
        try checkDirectory(path, key: "upstream.url", value: upstream.url, readable: true)
    }

    /// Refuses `path`, the directory `key` names (written `value` in the config when given), when it is missing,
    /// not a directory, or not readable (`readable`) or writable (otherwise) by the proxy.
    private static func checkDirectory(
        _ path: String,
        key: String,
        value: String? = nil,
        readable: Bool
    ) throws(ConfigurationError) {
        let (directory, note) = (absolute(path), relativeNote(path))
        func fail(_ problem: String) -> ConfigurationError {
            ConfigurationError(key: key, problem: (value.map { "\($0): " } ?? "") + problem + note)
        }
        var info = stat()
        guard stat(path, &info) == 0 else {
            let code = errno
            if code == ENOENT { throw fail("the directory \(directory) does not exist") }
            throw fail("cannot reach \(directory) (\(describe(errno: code)))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw fail("\(directory) is not a directory") }
        guard access(path, (readable ? R_OK : W_OK) | X_OK) == 0 else {
            let code = errno
            let action = readable ? "read the directory" : "write in"
            throw fail("cannot \(action) \(directory) (\(describe(errno: code)))")
        }
    }

    /// Refuses a CA file for a backend that is not reached over TLS, or one that gives no certificate.
    static func checkCAFile(_ caFile: String, upstream: ProxyConfiguration.Upstream) throws(ConfigurationError) {
        guard case .http(let origin)? = try? UpstreamOrigin(parsing: upstream.url), origin.scheme == "https" else {
            throw ConfigurationError(
                key: "upstream.caFile",
                problem: "is for an https:// upstream.url, and \(upstream.url) is not one"
            )
        }
        try checkReadable(caFile, key: "upstream.caFile")
        _ = try UpstreamTLS.certificates(in: caFile)
    }

    /// Refuses a listener certificate or key that cannot be read by this process (the image runs as `sdui`: a
    /// mounted key must be readable by it), a file that holds no certificate or key, and a key that is not the
    /// certificate's.
    public static func checkListenerTLS(_ tls: ListenerProtocols.TLS) throws(ConfigurationError) {
        try checkReadable(tls.certificate, key: "listen.tls.certificate")
        try checkReadable(tls.privateKey, key: "listen.tls.privateKey")
        try ListenerTLS.check(tls)
    }

    private static func checkReadable(_ path: String, key: String) throws(ConfigurationError) {
        guard access(path, R_OK) == 0 else {
            let code = errno
            throw ConfigurationError(
                key: key,
                problem: "cannot read \(absolute(path)) (\(describe(errno: code)))\(relativeNote(path))"
            )
        }
    }

    /// Refuses a shared queue whose lease does not outlast a delivery's wait for the backend's answer: a replica cut
    /// off from the database may still be waiting for it until `upstream.timeout` (which bounds the response head;
    /// once the head is in, the backend has taken the write), and another replica must not send the request
    /// again before then.
    public static func checkLease(
        _ queue: QueueConfiguration,
        upstream: ProxyConfiguration.Upstream
    ) throws(ConfigurationError) {
        guard queue.leaseTimeout > upstream.timeout else {
            throw ConfigurationError(
                key: "queue.leaseTimeout",
                problem: "must be longer than upstream.timeout (\(upstream.timeout)) with a postgres:// queue.store: "
                    + "a replica that loses the database may wait for the backend's answer until then, and another "
                    + "must not send the request again before it has come"
            )
        }
    }

    /// Refuses a directory for request bodies that is missing, not a directory, or not writable: every upload
    /// larger than `limits.requestBufferBytes` would fail there.
    public static func checkRequestBufferDirectory(_ path: String) throws(ConfigurationError) {
        try checkDirectory(path, key: "limits.requestBufferDirectory", readable: false)
    }

    /// Refuses a queue store directory the proxy could neither use nor create.
    public static func checkQueueStore(_ store: String) throws(ConfigurationError) {
        let (directory, note) = (absolute(store), relativeNote(store))
        func fail(_ problem: String) -> ConfigurationError {
            ConfigurationError(key: "queue.store", problem: problem + note)
        }
        var info = stat()
        if stat(store, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFDIR else { throw fail("\(directory) is not a directory") }
            guard access(store, W_OK | X_OK) == 0 else {
                let code = errno
                throw fail("cannot write in \(directory) (\(describe(errno: code)))")
            }
            let file = store.hasSuffix("/") ? store + "queue.sqlite" : store + "/queue.sqlite"
            if stat(file, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFREG else { throw fail("\(absolute(file)) is not a regular file") }
                guard access(file, R_OK | W_OK) == 0 else {
                    let code = errno
                    throw fail("cannot read and write \(absolute(file)) (\(describe(errno: code)))")
                }
            }
            return
        }
        // Missing: start-up creates it one directory at a time, as `mkdir -p` does. Every directory on the way
        // that exists must be one, and the first missing one must be creatable in its parent.
        var path = store.hasPrefix("/") ? "" : "."
        for component in store.split(separator: "/") {
            let parent = path.isEmpty ? "/" : path
            path += "/" + component
            if stat(path, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFDIR else {
                    throw fail("cannot create \(directory): \(absolute(path)) is not a directory")
                }
                continue
            }
            let code = errno
            guard code == ENOENT else {
                throw fail("cannot create \(directory): cannot reach \(absolute(path)) (\(describe(errno: code)))")
            }
            guard access(parent, W_OK | X_OK) == 0 else {
                let code = errno
                throw fail("cannot create \(directory): cannot write in \(absolute(parent)) (\(describe(errno: code)))")
            }
            return
        }
    }

    /// Refuses a listener host that does not resolve to an address (binding would fail on it).
    static func checkHost(_ host: String, key: String) throws(ConfigurationError) {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE
        hints.ai_family = AF_UNSPEC
        #if canImport(Darwin)
        hints.ai_socktype = SOCK_STREAM
        #else
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #endif
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &result)
        if let result { freeaddrinfo(result) }
        guard status == 0 else {
            let reason = String(cString: gai_strerror(status))
            throw ConfigurationError(key: key, problem: "\(host) does not resolve to an address (\(reason))")
        }
    }

    /// `path` made absolute against the working directory.
    static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/"), let directory = workingDirectory() else { return path }
        var relative = Substring(path)
        while relative.hasPrefix("./") { relative = relative.dropFirst(2) }
        if relative == "." || relative.isEmpty { return directory }
        return directory == "/" ? "/" + relative : directory + "/" + relative
    }

    /// For a relative `path`, where it was taken from: ` (a relative path is taken from the working directory, /srv)`.
    static func relativeNote(_ path: String) -> String {
        guard !path.hasPrefix("/"), let directory = workingDirectory() else { return "" }
        return " (a relative path is taken from the working directory, \(directory))"
    }

    static func workingDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func describe(errno code: Int32) -> String {
        String(cString: strerror(code))
    }
}
