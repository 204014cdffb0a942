/// Where the write queue keeps its requests, as `queue.store` says: a directory for a SQLite file of this
/// replica's own, or a PostgreSQL database the replicas share.
public enum QueueStoreLocation: Sendable, Equatable, CustomStringConvertible {
    /// The directory holding `queue.sqlite`.
    case sqlite(path: String)
    /// The database named by a `postgres://` or `postgresql://` URL.
    case postgres(PostgresURL)

    /// Reads a `queue.store` value: a PostgreSQL URL when it starts with one of their schemes, else a path.
    ///
    /// - Throws: ``PostgresURL/ParseError`` when it has a PostgreSQL scheme but cannot be read.
    public init(parsing store: String) throws(PostgresURL.ParseError) {
        if PostgresURL.hasPostgresScheme(store) {
            self = .postgres(try PostgresURL(parsing: store))
        } else {
            self = .sqlite(path: store)
        }
    }

    /// The directory, or the URL with its password left out: safe for logs and error messages.
    public var description: String {
        switch self {
        case .sqlite(let path): path
        case .postgres(let url): url.description
        }
    }
}
