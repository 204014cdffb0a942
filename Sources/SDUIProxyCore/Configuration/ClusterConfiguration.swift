/// Running several replicas of the proxy together (config key `cluster`): they share invalidations through a
/// PostgreSQL database. Without `cluster.postgres` the proxy runs as a single node.
public struct ClusterConfiguration: Sendable, Equatable {
    /// The shared database, or nil for a single node.
    public var postgres: PostgresURL?
    /// This replica's name among the others; empty means ``defaultReplicaName(hostName:processID:)``, resolved
    /// when the proxy starts.
    public var replicaName = ""

    /// The longest replica name.
    public static let maxReplicaNameLength = 128

    /// The defaults: a single node.
    public init() {}

    /// The name used when `replicaName` is empty: the host name, a dash and the process ID (`web-1-4711`).
    public static func defaultReplicaName(hostName: String, processID: Int32) -> String {
        let host = hostName.isEmpty ? "replica" : hostName
        return "\(String(host.prefix(maxReplicaNameLength - 12)))-\(processID)"
    }

    /// The name this replica goes by: ``replicaName``, or the default when it is empty.
    public func resolvedReplicaName(hostName: String, processID: Int32) -> String {
        replicaName.isEmpty ? Self.defaultReplicaName(hostName: hostName, processID: processID) : replicaName
    }

    // MARK: Parsing

    /// Reads the `cluster` section; every key has a default, and problems name the key path.
    static func parse(_ section: ConfigurationSection) throws(ConfigurationError) -> ClusterConfiguration {
        try section.rejectUnknownKeys(["postgres", "replicaName"])
        var cluster = ClusterConfiguration()
        let postgres = try section.string("postgres", default: "")
        if !postgres.isEmpty { cluster.postgres = try parsePostgresURL(postgres, key: "postgres", in: section) }
        cluster.replicaName = try section.string("replicaName", default: "")
        guard cluster.replicaName.count <= maxReplicaNameLength else {
            throw section.fail("replicaName", "must be at most \(maxReplicaNameLength) characters")
        }
        let allowed = cluster.replicaName.unicodeScalars.allSatisfy { scalar in
            scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "-_.:@".unicodeScalars.contains(scalar)
        }
        guard allowed else {
            throw section.fail("replicaName", "may hold only letters, digits and - _ . : @")
        }
        return cluster
    }

    /// Reads `text`, the value of `key` in `section`, as a PostgreSQL URL; the error names the key and never
    /// repeats the password.
    static func parsePostgresURL(
        _ text: String,
        key: String,
        in section: ConfigurationSection
    ) throws(ConfigurationError) -> PostgresURL {
        do {
            return try PostgresURL(parsing: text)
        } catch {
            throw section.fail(key, "is not a PostgreSQL URL: \(error.message)")
        }
    }
}
