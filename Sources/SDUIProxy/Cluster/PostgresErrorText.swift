import PostgresNIO

/// One line about a PostgreSQL error, for logs and start-up failures: the server's message and SQLSTATE, or what
/// went wrong with the connection.
///
/// `PSQLError`'s own `description` says nothing, so that it cannot leak data by accident, and its
/// `debugDescription` holds the whole query; this holds neither a query's parameters nor the password (which
/// the server never sends back).
public enum PostgresErrorText {
    public static func describe(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return String(describing: error) }
        var text = "\(error.code)"
        if let info = error.serverInfo {
            if let message = info[.message] { text += ": \(message)" }
            if let state = info[.sqlState] { text += " (SQLSTATE \(state))" }
        } else if let underlying = error.underlying {
            text += ": \(String(describing: underlying))"
        }
        return text
    }
}
