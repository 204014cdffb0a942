import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import SDUIProxyCore
import SQLiteNIO

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// Opening a store: the file checked or made, WAL mode, the schema and its migrations.
extension SQLiteQueueStore {
    /// Whether the database file at `path` exists: false when it does not (nor a write-ahead log of it).
    ///
    /// - Throws: ``QueueStoreError`` when it is empty or not a file, or when only its write-ahead log is left.
    static func checkExisting(_ path: String) throws -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let code = errno
            guard code == ENOENT else { throw QueueStoreError("cannot read the queue store \(path) (errno \(code))") }
            // The log of a store whose file was moved away: a new file would take its frames as its own.
            var walInfo = stat()
            if stat(path + "-wal", &walInfo) == 0 {
                throw damaged(path, "is missing, but its write-ahead log \(path)-wal is still there")
            }
            return false
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw damaged(path, "is not a regular file") }
        guard info.st_size > 0 else { throw damaged(path, "is empty (0 bytes)") }
        return true
    }

    /// Builds a new store at `path`: under a temporary name, then renamed into place.
    static func create(
        _ path: String,
        threadPool: NIOThreadPool,
        eventLoop: any EventLoop,
        logger: Logger
    ) async throws {
        let staging = path + ".new"
        // What a creation cut short left behind: never the queue, which is only ever at `path`.
        for leftover in [staging, staging + "-wal", staging + "-shm", staging + "-journal"] { unlink(leftover) }
        let connection = try await SQLiteConnection.open(
            storage: .file(path: staging),
            threadPool: threadPool,
            logger: logger,
            on: eventLoop
        )
        do {
            try await prepare(connection, path: staging)
        } catch {
            try? await connection.close()
            unlink(staging)
            throw error
        }
        // The last connection to close checkpoints the log into the file and removes it.
        try await connection.close()
        guard rename(staging, path) == 0 else {
            let code = errno
            unlink(staging)
            throw QueueStoreError("cannot create the queue store \(path) (rename failed, errno \(code))")
        }
        syncDirectory(of: path)
    }

    /// Refuses a file that is not an SQLite database, or one without the queue's table.
    static func checkSchema(_ connection: SQLiteConnection, path: String) async throws {
        let tables: [SQLiteRow]
        do {
            tables = try await connection.query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'queued_requests'"
            )
        } catch {
            throw damaged(path, "is not a readable SQLite database (\(error))")
        }
        guard !tables.isEmpty else { throw damaged(path, "is an SQLite database without the queue's table") }
    }

    /// WAL mode, full sync, and the schema.
    static func prepare(_ connection: SQLiteConnection, path: String) async throws {
        let mode = try await connection.query("PRAGMA journal_mode=WAL").first?.column("journal_mode")?.string
        guard mode?.lowercased() == "wal" else {
            throw QueueStoreError("cannot switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        for statement in schema {
            _ = try await connection.query(statement)
        }
        try await migrate(connection)
    }

    /// The error for a store file that exists and no longer holds the queue.
    static func damaged(_ path: String, _ problem: String) -> QueueStoreError {
        QueueStoreError(
            """
            the queue store \(path) \(problem): the writes it held cannot be read, and it is not replaced by an \
            empty one. Restore it from a backup, or move it aside (with \(fileName)-wal and \(fileName)-shm if \
            present) to start with an empty queue
            """
        )
    }

    static let schema = [
        "PRAGMA synchronous=FULL",
        """
        CREATE TABLE IF NOT EXISTS queued_requests (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            route TEXT NOT NULL,
            method TEXT NOT NULL,
            target TEXT NOT NULL,
            headers BLOB,
            body BLOB,
            enqueued_at INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
            attempts INTEGER NOT NULL,
            next_attempt_at INTEGER NOT NULL,
            last_error TEXT,
            status INTEGER,
            finished_at INTEGER,
            notify_pending INTEGER NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX IF NOT EXISTS queued_requests_pending ON queued_requests (route, seq) WHERE state = 'pending'",
        """
        CREATE INDEX IF NOT EXISTS queued_requests_due ON queued_requests (next_attempt_at, seq)
        WHERE state = 'pending'
        """,
        """
        CREATE INDEX IF NOT EXISTS queued_requests_finished ON queued_requests (finished_at)
        WHERE state <> 'pending'
        """,
    ]

    /// Brings a store made by an earlier version up to this schema: columns added since are added with their
    /// defaults, then the indexes over them are made.
    static func migrate(_ connection: SQLiteConnection) async throws {
        let columns = try await connection.query("PRAGMA table_info(queued_requests)").compactMap {
            $0.column("name")?.string
        }
        if !columns.contains("notify_pending") {
            _ = try await connection.query(
                "ALTER TABLE queued_requests ADD COLUMN notify_pending INTEGER NOT NULL DEFAULT 0"
            )
        }
        _ = try await connection.query(
            """
            CREATE INDEX IF NOT EXISTS queued_requests_unnotified ON queued_requests (finished_at, seq)
            WHERE notify_pending = 1
            """
        )
        // Creates and the writes that name them: a create's local identifier (unique while it is pending) and the
        // backend's; a write's creates (a JSON array of queue ids), and the one whose failure failed it.
        let identifierColumns = [
            "local_id TEXT", "remote_id TEXT", "remote_is_number INTEGER NOT NULL DEFAULT 0", "depends_on TEXT",
            "dependency_failed TEXT",
        ]
        for column in identifierColumns where !columns.contains(String(column.prefix { $0 != " " })) {
            _ = try await connection.query("ALTER TABLE queued_requests ADD COLUMN \(column)")
        }
        _ = try await connection.query(
            """
            CREATE UNIQUE INDEX IF NOT EXISTS queued_requests_pending_local ON queued_requests (local_id)
            WHERE state = 'pending' AND local_id IS NOT NULL
            """
        )
        _ = try await connection.query(
            """
            CREATE INDEX IF NOT EXISTS queued_requests_local ON queued_requests (local_id, seq)
            WHERE local_id IS NOT NULL
            """
        )
    }

    /// `mkdir -p`.
    static func makeDirectory(_ directory: String) throws {
        var path = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            path += "/" + component
            if mkdir(path, 0o750) != 0 {
                let code = errno
                var info = stat()
                guard code == EEXIST, stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                    throw QueueStoreError("cannot create the queue directory \(path) (errno \(code))")
                }
            }
        }
    }
}

/// Makes a rename in the directory of `path` durable; best effort.
private func syncDirectory(of path: String) {
    let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
    let descriptor = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY)
    guard descriptor >= 0 else { return }
    fsync(descriptor)
    close(descriptor)
}
